//! Reads back what a pass case registered. Included by each pass case with `#[path]`.

use prompt_registry::__private::{Registration, inventory};

/// The registrations made from the source file `file` (as given by `file!()`), sorted by id.
pub fn from(file: &str) -> Vec<&'static Registration> {
    let mut registered: Vec<&'static Registration> = inventory::iter::<Registration>()
        .filter(|registration| registration.file == file)
        .collect();
    registered.sort_by_key(|registration| registration.id);
    registered
}

/// The registration with the given id, made from `file`.
pub fn get(file: &str, id: &str) -> &'static Registration {
    from(file)
        .into_iter()
        .find(|registration| registration.id == id)
        .unwrap_or_else(|| panic!("nothing registered as {id:?} from {file}"))
}

/// The 1-based line of the first line of `source` that contains `needle`.
pub fn line_of(source: &str, needle: &str) -> u32 {
    let index = source
        .lines()
        .position(|line| line.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not found"));
    u32::try_from(index + 1).expect("line fits u32")
}
