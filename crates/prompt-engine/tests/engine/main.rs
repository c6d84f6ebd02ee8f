//! The engine's tests, one binary: its causes, its bounds, and sessions across launches.

mod bounds;
mod causes;
mod json_path;
mod launches;
