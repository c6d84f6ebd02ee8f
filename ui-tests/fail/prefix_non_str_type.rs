use std::cell::Cell;
use std::sync::{LazyLock, Mutex};

use prompt_registry::prompt_component;

/// Built at run time.
#[prompt_component(placement = "prefix")]
const OWNED: String = String::new();

/// Mutable behind a lock.
#[prompt_component(placement = "prefix")]
static LOCKED: Mutex<String> = Mutex::new(String::new());

/// Mutable in a cell.
#[prompt_component(placement = "prefix")]
const CELL: Cell<&str> = Cell::new("");

/// Computed on first use.
#[prompt_component(placement = "prefix")]
static LAZY: LazyLock<String> = LazyLock::new(|| "lazy".to_owned());

fn main() {
    let _ = (OWNED, &LOCKED, CELL, &LAZY);
}
