//! Grammar-constrained tool calls on the real llama.cpp engine: SmolLM2-135M, a model
//! that was never taught to call tools, sampled at temperature 1, writes only calls the
//! loop's parser reads, of offered tools, with arguments their schemas accept; the same
//! seeds without the grammar write none.

use agent_core::tools::{native_reply_grammar, parse_actions, untagged_json_calls, ToolSpecs};
use agent_llm::grammar::CallChoice;
use agent_llm::{resolve_model, ChatMessage, ChatRequest, FinishReason, ModelSpec, Role, SamplingParams};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_constrained_reply_of_an_untrained_model_is_a_valid_call() {
    let model = resolve_model(&ModelSpec::Builtin("smollm2-135m".into()), &crate::llamacpp::options()).await.unwrap();
    assert!(model.enforces_grammar());
    let specs = ToolSpecs::builtin().unwrap();
    let tools = specs.definitions();
    let grammar = native_reply_grammar(&tools, &specs, &CallChoice::Required).unwrap();
    let messages = vec![
        ChatMessage::new(Role::System, "You are an agent. Call a tool."),
        ChatMessage::new(Role::User, "List the files in /app, then finish."),
    ];
    // Valid calls per arm (with, without the grammar), and complete replies with it.
    let mut valid = [0usize; 2];
    let mut finished = 0;
    for seed in 1..=3u64 {
        for (i, constrained) in [true, false].into_iter().enumerate() {
            let request = ChatRequest {
                messages: messages.clone(),
                sampling: SamplingParams {
                    max_tokens: Some(200),
                    temperature: Some(1.0),
                    seed: Some(seed),
                    ..Default::default()
                },
                tools: tools.clone(),
                grammar: constrained.then(|| grammar.clone()),
            };
            let reply = model.chat(&request, &mut |_| {}, &CancellationToken::new()).await.unwrap();
            eprintln!("seed {seed}, grammar {constrained}: {:?} {:?}", reply.finish_reason, reply.text);
            // What a length limit cut short is left out: the calls up to the last close.
            let whole = match reply.finish_reason {
                FinishReason::Stop => reply.text.as_str(),
                _ => reply.text.rfind("</tool_call>").map_or("", |end| &reply.text[..end + "</tool_call>".len()]),
            };
            // (A cut-short reply in another opener has no closed call to look at.)
            let cut_untagged = reply.finish_reason != FinishReason::Stop && !reply.text.starts_with("<tool_call>");
            let (actions, errors) = calls_in(whole, &specs);
            if constrained {
                finished += usize::from(reply.finish_reason == FinishReason::Stop);
                // The call comes first (`required`), and every closed call parses: an
                // offered tool, arguments its schema and the loop's validation accept.
                let opened = ["<tool_call>", "```json", "{"].iter().any(|o| reply.text.starts_with(o));
                assert!(opened, "{}", reply.text);
                assert!(cut_untagged || actions > 0, "seed {seed}: no complete call in {}", reply.text);
                assert!(errors.is_empty(), "seed {seed}: {errors:?}\n{}", reply.text);
            }
            valid[i] += actions;
        }
    }
    assert!(finished >= 1, "a constrained reply can end: {finished} of 3 did within 200 tokens");
    assert!(valid[0] > valid[1], "the grammar changed what was sampled: {valid:?} valid calls (with, without)");
}

/// The calls in a reply as the loop reads a native one: `<tool_call>` tags, else a call's
/// JSON in a ```json block or alone on a line. Returns the valid calls and the errors.
fn calls_in(text: &str, specs: &ToolSpecs) -> (usize, Vec<String>) {
    let parsed = parse_actions(text, specs);
    if parsed.actions.is_empty() && !text.contains("<tool_call>") {
        let untagged = untagged_json_calls(text, specs);
        let errors = untagged.iter().filter_map(|c| c.as_ref().err().map(|e| e.message.clone())).collect();
        return (untagged.iter().filter(|c| c.is_ok()).count(), errors);
    }
    (parsed.actions.len(), parsed.errors.iter().map(|e| e.message.clone()).collect())
}
