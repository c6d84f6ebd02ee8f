use prompt_registry::prompt_component;

/// Notes about the repository layout.
#[prompt_component(
    id = "the_notes_about_the_repository_layout_the_notes_about_the_repository_layout_the_notes_about_the_repository_layout_the_notes_about_the_repository_layout"
)]
const LAYOUT_NOTES: &str = "Sources are in src/.";

fn main() {
    let _ = LAYOUT_NOTES;
}
