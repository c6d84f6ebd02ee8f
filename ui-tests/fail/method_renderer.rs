use prompt_registry::{SessionContext, prompt_component};

struct Agent;

impl Agent {
    /// A method.
    #[prompt_component]
    fn instructions(&self, _session: &SessionContext) -> String {
        String::new()
    }
}

fn main() {
    let _ = Agent.instructions(&SessionContext::default());
}
