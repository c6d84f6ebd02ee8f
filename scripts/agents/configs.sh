# The agents' quiet configurations, shared by scripts/capture-agents.sh and
# scripts/proxy-agents.sh (sourced; defines functions only).

# codex_config HOME MODEL PROVIDER_NAME BASE_URL PROJECT: Codex's config.toml in HOME (its
# CODEX_HOME): one provider "cacheline" on the Responses API at BASE_URL whose key is in
# CACHELINE_API_KEY, no retries, no approvals, no analytics, PROJECT trusted; and AGENT_ENV
# set to match.
codex_config() {
  local home=$1 model=$2 name=$3 base_url=$4 project=$5
  mkdir -p "$home"
  cat >"$home/config.toml" <<CFG
model = "$model"
model_provider = "cacheline"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[model_providers.cacheline]
name = "$name"
base_url = "$base_url"
env_key = "CACHELINE_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[otel]
exporter = "none"

[projects."$project"]
trust_level = "trusted"
CFG
  AGENT_ENV=("CODEX_HOME=$home" "CACHELINE_API_KEY=sk-test-0000" "RUST_LOG=error")
}

# quiet_settings DIR AUTH: Gemini CLI's settings file, which Qwen Code (its fork) shares: the
# given auth type, no telemetry, no update checks, no folder-trust prompt, no IDE.
quiet_settings() {
  local dir=$1 auth=$2
  mkdir -p "$dir"
  cat >"$dir/settings.json" <<CFG
{
  "security": {"auth": {"selectedType": "$auth"}, "folderTrust": {"enabled": false}},
  "privacy": {"usageStatisticsEnabled": false},
  "telemetry": {"enabled": false},
  "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
  "ide": {"enabled": false}
}
CFG
}
