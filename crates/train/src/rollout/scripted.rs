//! Warm-start demonstrations recorded through the real loop: each training task's
//! reference solution, written as the model's own native tool calls (a `bash` call with
//! the script, then `finish`), is "sampled" by a sampler that answers from a script, in
//! a real container with the product's system prompt, tools and observations. The
//! rollouts that resolve their task are the demonstrations: their tokens are exactly what
//! a rollout of the policy would hold, so the warm start and GRPO train the same format.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokenizers::Tokenizer;

use super::engine::RolloutSampler;
use super::sampler::{GenerateRequest, Generated};
use crate::error::TrainError;
use crate::model::Qwen3;
use agent_bench::solution::Solution;
use agent_bench::TaskEntry;

/// A sampler that replies from a script per rollout session.
pub struct ScriptedSampler {
    tokenizer: Arc<Tokenizer>,
    scripts: Mutex<HashMap<u64, VecDeque<String>>>,
}

impl ScriptedSampler {
    /// A sampler with no scripts yet.
    pub fn new(tokenizer: Arc<Tokenizer>) -> Self {
        ScriptedSampler { tokenizer, scripts: Mutex::new(HashMap::new()) }
    }

    /// The replies of `session`, in order.
    pub fn script(&self, session: u64, replies: Vec<String>) {
        if let Ok(mut s) = self.scripts.lock() {
            s.insert(session, replies.into());
        }
    }
}

#[async_trait]
impl RolloutSampler for ScriptedSampler {
    fn submit(&self, request: GenerateRequest) -> Result<(), TrainError> {
        let next = self
            .scripts
            .lock()
            .map_err(|_| TrainError::Other("the scripted sampler is poisoned".into()))?
            .get_mut(&request.session)
            .and_then(VecDeque::pop_front)
            // Past its script a demonstration ends its turn with nothing; the loop stops it.
            .unwrap_or_default();
        let mut ids = self
            .tokenizer
            .encode(next.as_str(), false)
            .map_err(|e| TrainError::Other(format!("the tokenizer failed on a scripted reply: {e}")))?
            .get_ids()
            .to_vec();
        ids.truncate(request.max_new_tokens.saturating_sub(1));
        let stopped = match request.stop.first() {
            Some(&stop) => {
                ids.push(stop);
                true
            }
            None => false,
        };
        let logp = vec![0.0; ids.len()];
        let _ = request.reply.send(Ok(Generated { ids, logp, stopped, computed_prompt_tokens: request.prompt.len() }));
        Ok(())
    }

    fn close(&self, session: u64) {
        if let Ok(mut s) = self.scripts.lock() {
            s.remove(&session);
        }
    }

    async fn load_policy(&self, _policy: &Qwen3) -> Result<(), TrainError> {
        Ok(())
    }

    fn off_policy(&self) -> bool {
        false
    }
}

/// The replies that carry out a task's reference solution in the native tool format:
/// the script (comments and the shebang left out) as one `bash` call, then `finish`.
/// `None` for a task without a solution script.
pub fn oracle_replies(entry: &TaskEntry) -> Option<Vec<String>> {
    let task = entry.task.as_ref().ok()?;
    let Solution::Script(path) = &task.solution else { return None };
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines: Vec<&str> = Vec::new();
    let mut in_heredoc: Option<String> = None;
    for line in text.lines() {
        // A here-document's body is data: its lines stay as they are.
        if let Some(end) = &in_heredoc {
            lines.push(line);
            if line.trim() == end {
                in_heredoc = None;
            }
            continue;
        }
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t == "set -e" {
            continue;
        }
        if let Some(end) = heredoc_end(t) {
            in_heredoc = Some(end);
        }
        lines.push(line);
    }
    if lines.is_empty() {
        return None;
    }
    let command = lines.join("\n");
    // Written as Qwen's template shows a call (`{"name": …, "arguments": …}`, Python's
    // `json.dumps` spacing), which is how the model writes one.
    let call = |name: &str, key: &str, value: &str| {
        let value = serde_json::Value::String(value.to_string());
        format!("<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {{\"{key}\": {value}}}}}\n</tool_call>")
    };
    Some(vec![call("bash", "cmd", &command), call("finish", "message", "Done: ran the commands the task needs.")])
}

/// The terminator of a here-document this line opens (`<<'EOF'`, `<<EOF`, `<<-EOF`).
fn heredoc_end(line: &str) -> Option<String> {
    let at = line.find("<<")?;
    let rest = line[at + 2..].trim_start_matches('-').trim_start();
    let word: String =
        rest.trim_start_matches(['\'', '"']).chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    (!word.is_empty()).then_some(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry_with_solution(dir: &std::path::Path, script: &str) -> TaskEntry {
        std::fs::write(dir.join("task.yaml"), "instruction: Do it.\n").unwrap();
        std::fs::write(dir.join("Dockerfile"), "FROM debian\n").unwrap();
        std::fs::write(dir.join("run-tests.sh"), "true\n").unwrap();
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        std::fs::write(dir.join("solution.sh"), script).unwrap();
        agent_bench::discover(&[dir.to_path_buf()]).unwrap().remove(0)
    }

    #[test]
    fn the_reference_script_becomes_one_bash_call_then_finish() {
        let dir = tempfile::tempdir().unwrap();
        let script = "#!/bin/bash\n# The reference solution.\nset -e\ncd /app\ncat > /app/a.py <<'EOF'\n# kept: data\n\nprint(1)\nEOF\ngrep -c x /app/f > /app/answer.txt\n";
        let replies = oracle_replies(&entry_with_solution(dir.path(), script)).unwrap();
        assert_eq!(replies.len(), 2);
        let body = replies[0].strip_prefix("<tool_call>\n").unwrap().strip_suffix("\n</tool_call>").unwrap();
        assert!(body.starts_with("{\"name\": \"bash\", \"arguments\": {\"cmd\": "), "{body}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            v["arguments"]["cmd"],
            "cd /app\ncat > /app/a.py <<'EOF'\n# kept: data\n\nprint(1)\nEOF\ngrep -c x /app/f > /app/answer.txt"
        );
        assert!(replies[1].contains("\"name\": \"finish\""));
    }

    #[tokio::test]
    async fn the_scripted_sampler_answers_each_session_from_its_own_script() {
        let dir = tempfile::tempdir().unwrap();
        agent_local::tiny_qwen3::write_tiny_qwen3(dir.path(), &Default::default()).unwrap();
        let tokenizer = Arc::new(Tokenizer::from_file(dir.path().join("tokenizer.json")).unwrap());
        let s = ScriptedSampler::new(tokenizer.clone());
        s.script(7, vec!["hello".into()]);
        let ask = |session| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            s.submit(GenerateRequest {
                session,
                prompt: vec![1, 2, 3],
                max_new_tokens: 16,
                temperature: 1.0,
                top_p: 1.0,
                seed: 0,
                stop: vec![99],
                cancel: Default::default(),
                grammar: None,
                reply: tx,
            })
            .unwrap();
            rx
        };
        let first = ask(7).await.unwrap().unwrap();
        let hello = tokenizer.encode("hello", false).unwrap().get_ids().to_vec();
        assert_eq!(first.ids[..first.ids.len() - 1], hello[..]);
        assert_eq!(first.ids.last(), Some(&99));
        assert!(first.stopped && first.logp.iter().all(|l| *l == 0.0));
        // Past its script, and for another session: an empty reply.
        assert_eq!(ask(7).await.unwrap().unwrap().ids, vec![99]);
        assert_eq!(ask(8).await.unwrap().unwrap().ids, vec![99]);
    }
}
