//! Ready for crates.io: the crates a user installs are publishable and carry both license
//! files and a README; every internal crate says `publish = false`. (`cargo package` with
//! verification of the published set runs in `.ci/run`; here the manifests and the file
//! lists are checked, which takes seconds.)

use std::path::Path;
use std::process::Command;

/// The crates a user installs, by package name.
const PUBLISHED: &[&str] = &[
    "prompt-core",
    "prompt-macros",
    "prompt-registry",
    "prompt-engine",
    "prompt-wire",
    "prompt-client",
    "prompt-measure",
    "prompt-template-probe",
    "prompt-llama",
    "prompt-reference",
    "cacheline-proxy",
    "cacheline-import",
    "cacheline-cli",
];

fn cargo(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .output()
        .unwrap_or_else(|e| panic!("cargo {args:?}: {e}"));
    assert!(
        output.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn members() -> Vec<serde_json::Value> {
    let metadata: serde_json::Value = serde_json::from_str(&cargo(&[
        "metadata",
        "--offline",
        "--no-deps",
        "--format-version",
        "1",
    ]))
    .unwrap_or_else(|e| panic!("cargo metadata: {e}"));
    metadata["packages"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("cargo metadata has no packages"))
}

#[test]
fn published_crates_have_crates_io_metadata_and_internal_ones_are_not_published() {
    let members = members();
    for package in &members {
        let name = package["name"].as_str().unwrap_or_default();
        // `publish = false` is an empty list of registries; absent (`null`) is crates.io.
        let published = !package["publish"].as_array().is_some_and(Vec::is_empty);
        assert_eq!(
            published,
            PUBLISHED.contains(&name),
            "{name}: publish is {}",
            package["publish"]
        );
        if !published {
            continue;
        }
        for field in ["description", "license", "readme"] {
            assert!(package[field].is_string(), "{name}: no {field}");
        }
        assert!(
            package["keywords"]
                .as_array()
                .is_some_and(|k| !k.is_empty() && k.len() <= 5),
            "{name}: keywords {}",
            package["keywords"]
        );
        assert!(
            package["categories"]
                .as_array()
                .is_some_and(|c| !c.is_empty()),
            "{name}: no categories"
        );
        assert!(
            package["metadata"]["docs"]["rs"]["all-features"] == true,
            "{name}: no [package.metadata.docs.rs] all-features"
        );
        // Every workspace dependency a published crate has is versioned, or `cargo package`
        // cannot write it into the published manifest.
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            if dep["path"].is_string() && dep["kind"] != "dev" {
                assert_ne!(dep["req"], "*", "{name}: {} has no version", dep["name"]);
            }
        }
    }
    for name in PUBLISHED {
        assert!(
            members.iter().any(|p| p["name"] == *name),
            "{name} is not a workspace member"
        );
    }
}

#[test]
fn every_published_crate_packages_both_license_files_and_its_readme() {
    for name in PUBLISHED {
        let files = cargo(&[
            "package",
            "--offline",
            "--list",
            "--allow-dirty",
            "-p",
            name,
        ]);
        let files: Vec<&str> = files.lines().collect();
        for file in ["LICENSE-MIT", "LICENSE-APACHE", "README.md", "Cargo.toml"] {
            assert!(
                files.contains(&file),
                "{name} packages no {file}: {files:?}"
            );
        }
    }
    for file in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file))
                .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(text.len() > 1000, "{file} is not a license text");
    }
}
