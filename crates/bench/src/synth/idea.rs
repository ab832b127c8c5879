//! The idea role: from a seed task, brainstorm variations of the skills it tests, then
//! — shown the criteria only now, so that they shape the choice and not the
//! brainstorm — choose the best few. Each chosen idea becomes a build item.

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::queue::{Item, Outcome, Role};
use super::run::{RoleOutput, SynthCtx};
use crate::task::BenchTask;
use agent_llm::{ChatMessage, ChatRequest, Role as ChatRole, SamplingParams};

/// An idea item's input.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdeaInput {
    pub seed: String,
    pub seed_dir: std::path::PathBuf,
}

/// One chosen idea: a build item's input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Idea {
    pub seed: String,
    pub title: String,
    pub idea: String,
    /// This idea's share of the tokens its idea agent used.
    #[serde(default)]
    pub idea_tokens: u64,
}

/// Runs an idea item.
pub async fn run(ctx: &SynthCtx, item: &Item) -> RoleOutput {
    let input: IdeaInput = match serde_json::from_value(item.payload.clone()) {
        Ok(i) => i,
        Err(e) => return RoleOutput::failed(format!("the item's input is not an idea input: {e}")),
    };
    let seed = match BenchTask::load(&input.seed_dir) {
        Ok(t) => t,
        Err(e) => return RoleOutput::failed(format!("the seed task cannot be loaded: {e}")),
    };
    let model = match ctx.models.idea.get().await {
        Ok(m) => m,
        Err(e) => return RoleOutput::failed(e),
    };
    let brainstorm_prompt = include_str!("prompts/idea_brainstorm.md")
        .replace("{name}", &input.seed)
        .replace("{instruction}", seed.instruction.trim())
        .replace("{count}", &ctx.plan.brainstorm.to_string());
    let mut messages = vec![ChatMessage::new(ChatRole::User, brainstorm_prompt)];
    let cancel = CancellationToken::new();
    let sampling = SamplingParams { max_tokens: Some(1024), temperature: Some(0.8), ..Default::default() };
    let mut tokens = 0;
    let mut log = String::new();
    let brainstorm = match model
        .chat(
            &ChatRequest { messages: messages.clone(), sampling: sampling.clone(), tools: vec![], grammar: None },
            &mut |_| {},
            &cancel,
        )
        .await
    {
        Ok(r) => r,
        Err(e) => return RoleOutput::failed(format!("the idea model failed while brainstorming: {e}")),
    };
    tokens += brainstorm.usage.prompt_tokens + brainstorm.usage.completion_tokens;
    log.push_str(&format!("## brainstorm\n{}\n", brainstorm.text));
    messages.push(ChatMessage::new(ChatRole::Assistant, brainstorm.text.clone()));
    let choose_prompt = include_str!("prompts/idea_choose.md").replace("{count}", &ctx.plan.ideas_per_seed.to_string());
    messages.push(ChatMessage::new(ChatRole::User, choose_prompt));
    let chosen =
        match model.chat(&ChatRequest { messages, sampling, tools: vec![], grammar: None }, &mut |_| {}, &cancel).await
        {
            Ok(r) => r,
            Err(e) => return RoleOutput::failed(format!("the idea model failed while choosing: {e}")),
        };
    tokens += chosen.usage.prompt_tokens + chosen.usage.completion_tokens;
    log.push_str(&format!("## chosen\n{}\n", chosen.text));
    let _ = std::fs::create_dir_all(ctx.dirs.work(&item.id));
    let _ = std::fs::write(ctx.dirs.work(&item.id).join("idea.log"), &log);

    let mut ideas = parse_choices(&chosen.text);
    if ideas.is_empty() {
        // A model that cannot write JSON still brainstormed: take its first lines.
        ideas = parse_list(&brainstorm.text);
    }
    ideas.truncate(ctx.plan.ideas_per_seed);
    if ideas.is_empty() {
        return RoleOutput {
            outcome: Outcome::Rejected {
                reason: "the idea model proposed nothing usable (no JSON choice, no list)".into(),
            },
            children: vec![],
            tokens,
        };
    }
    let share = tokens / ideas.len() as u64;
    let children: Vec<Item> = ideas
        .iter()
        .enumerate()
        .map(|(k, (title, idea))| {
            let idea = Idea { seed: input.seed.clone(), title: title.clone(), idea: idea.clone(), idea_tokens: share };
            item.child(&(k + 1).to_string(), Role::Build, &idea)
        })
        .collect();
    let titles: Vec<&String> = ideas.iter().map(|(t, _)| t).collect();
    RoleOutput { outcome: Outcome::Done { result: serde_json::json!({ "ideas": titles }) }, children, tokens }
}

#[derive(Deserialize)]
struct Choice {
    title: String,
    idea: String,
}

/// The `{"title": …, "idea": …}` objects of a reply, wherever they are (one per line,
/// in a list, in a code fence).
pub fn parse_choices(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == '{' {
            let mut depth = 0;
            let mut in_str = false;
            let mut escaped = false;
            for j in i..bytes.len() {
                let c = bytes[j];
                if in_str {
                    match (escaped, c) {
                        (true, _) => escaped = false,
                        (false, '\\') => escaped = true,
                        (false, '"') => in_str = false,
                        _ => {}
                    }
                    continue;
                }
                match c {
                    '"' => in_str = true,
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            let candidate: String = bytes[i..=j].iter().collect();
                            if let Ok(c) = serde_json::from_str::<Choice>(&candidate) {
                                if !c.title.trim().is_empty() && !c.idea.trim().is_empty() {
                                    out.push((c.title.trim().to_string(), c.idea.trim().to_string()));
                                }
                            }
                            i = j;
                            break;
                        }
                    }
                    _ => {}
                }
            }
        }
        i += 1;
    }
    out
}

/// The items of a numbered or bulleted list, each as (title, idea).
pub fn parse_list(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let t = l.trim();
            let rest = t
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .strip_prefix(['.', ')'])
                .or_else(|| t.strip_prefix("- "))
                .or_else(|| t.strip_prefix("* "))?;
            let idea = rest.trim().trim_matches('*').trim();
            if idea.split_whitespace().count() < 5 {
                return None;
            }
            let title: String = idea.split_whitespace().take(6).collect::<Vec<_>>().join(" ");
            Some((title, idea.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_are_found_in_lines_lists_and_fences() {
        let text =
            "Here:\n```json\n{\"title\": \"Word count\", \"idea\": \"Count words in /app/a.txt {braces}\"}\n```\n\
                    [{\"title\": \"B\", \"idea\": \"b\"}, {\"title\": \"\", \"idea\": \"no title\"}]";
        assert_eq!(
            parse_choices(text),
            vec![("Word count".into(), "Count words in /app/a.txt {braces}".into()), ("B".into(), "b".into())]
        );
        assert!(parse_choices("no json here").is_empty());
    }

    #[test]
    fn a_plain_list_gives_ideas_too() {
        let text = "1. Write the number of lines of /app/log.txt into /app/n.txt.\n2) short one\n- Sort /app/names.txt alphabetically into /app/sorted.txt today\nprose";
        let ideas = parse_list(text);
        assert_eq!(ideas.len(), 2);
        assert_eq!(ideas[0].0, "Write the number of lines of");
    }
}
