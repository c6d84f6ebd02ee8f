//! The provider's verdict beside the engine's: read and reconciled in one place, the
//! engine's [`prompt_engine::provider`]; here at its old path.

pub use prompt_engine::provider::{Agreement, ProviderTally, ProviderVerdict, diagnostics_api};
