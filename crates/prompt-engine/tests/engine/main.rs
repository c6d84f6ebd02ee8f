//! The engine's tests, one binary: its causes and its bounds.

mod bounds;
mod causes;
mod json_path;
