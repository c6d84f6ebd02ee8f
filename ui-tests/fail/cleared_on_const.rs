use prompt_registry::prompt_component;

/// How to answer.
#[prompt_component(placement = "tail", cleared = "Answer as you like.")]
const ANSWER_STYLE: &str = "Answer briefly.";

fn main() {}
