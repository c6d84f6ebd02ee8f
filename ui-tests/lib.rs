//! trybuild suite lives in tests.
