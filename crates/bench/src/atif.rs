//! Export of our JSONL trajectories to ATIF (Agent Trajectory Interchange Format,
//! Harbor RFC 0001, v1.4): one JSON document with a system step, the user's
//! instruction, and one agent step per model turn carrying its tool calls, their
//! observations and its token metrics.

use agent_protocol::trajectory::Trajectory;
use serde_json::{json, Map, Value};

/// The schema version written.
pub const ATIF_VERSION: &str = "ATIF-v1.4";

/// Converts the lines of a trajectory JSONL file; unreadable lines are skipped (a
/// killed episode may end mid-line).
pub fn to_atif(jsonl: &str) -> Value {
    let t = Trajectory::parse_lenient(jsonl);
    let model = t.start.as_ref().map_or("unknown", |s| s.model.as_str()).to_string();
    let mut steps: Vec<Value> = Vec::new();
    let mut push = |mut step: Map<String, Value>| {
        step.insert("step_id".into(), json!(steps.len() + 1));
        steps.push(Value::Object(step));
    };
    if let Some(start) = &t.start {
        push(obj(json!({"source": "system", "message": start.system_prompt})));
    }
    let (mut prompt, mut completion) = (0u64, 0u64);
    for (i, turn) in t.turns.iter().enumerate() {
        // Later user messages are the observations, already attached to the agent step.
        if i == 0 {
            push(obj(json!({"source": "user", "message": turn.user.content})));
        }
        prompt += turn.usage.prompt_tokens;
        completion += turn.usage.completion_tokens;
        let calls: Vec<Value> = turn
            .observations
            .iter()
            .map(|o| json!({"tool_call_id": o.call_id, "function_name": o.tool, "arguments": o.args}))
            .collect();
        let results: Vec<Value> =
            turn.observations.iter().map(|o| json!({"source_call_id": o.call_id, "content": o.observation})).collect();
        let mut metrics = obj(json!({
            "prompt_tokens": turn.usage.prompt_tokens,
            "completion_tokens": turn.usage.completion_tokens,
        }));
        if let Some(ids) = &turn.prompt_token_ids {
            metrics.insert("prompt_token_ids".into(), json!(ids));
        }
        if let Some(ids) = &turn.completion_token_ids {
            metrics.insert("completion_token_ids".into(), json!(ids));
        }
        let mut step = obj(json!({
            "source": "agent",
            "model_name": model,
            "message": turn.assistant,
            "metrics": metrics,
        }));
        if !calls.is_empty() {
            step.insert("tool_calls".into(), Value::Array(calls));
            step.insert("observation".into(), json!({ "results": results }));
        }
        if !turn.parse_errors.is_empty() {
            step.insert("extra".into(), json!({ "parse_errors": turn.parse_errors }));
        }
        push(step);
    }
    json!({
        "schema_version": ATIF_VERSION,
        "session_id": t.start.as_ref().map(|s| s.episode_id.clone()),
        "agent": {"name": "agent", "version": env!("CARGO_PKG_VERSION"), "model_name": model},
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": prompt,
            "total_completion_tokens": completion,
            "total_steps": steps.len(),
        },
        "extra": {"end_reason": t.end.as_ref().map(|e| e.reason), "run_id": t.start.as_ref().map(|s| s.run_id.clone())},
    })
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_turns_tool_calls_and_metrics() {
        let jsonl = concat!(
            r#"{"type":"episode_start","schema":2,"episode_id":"e1","run_id":"r","model":"m","image":"i","started_at_unix_ms":1,"system_prompt":"be good"}"#,
            "\n",
            r#"{"type":"turn","turn":1,"user":{"role":"user","content":"do it"},"assistant":"<bash>..","finish_reason":"stop","usage":{"prompt_tokens":10,"completion_tokens":3},"model_ms":1,"actions":[],"observations":[{"call_id":"c1","tool":"bash","args":{"cmd":"ls"},"observation":"a.txt","exit_code":0,"timed_out":false,"duration_ms":1}],"parse_errors":[]}"#,
            "\n",
            r#"{"type":"turn","turn":2,"user":{"role":"user","content":"<bash_output>"},"assistant":"done","finish_reason":"stop","usage":{"prompt_tokens":20,"completion_tokens":2},"model_ms":1,"actions":[],"parse_errors":[],"observations":[]}"#,
            "\n{\"type\":\"episode_end\",\"reason\":\"finished\",\"turns\":2,\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":5},\"finish_message\":null,\"duration_ms\":5}\n{truncated"
        );
        let a = to_atif(jsonl);
        assert_eq!(a["schema_version"], ATIF_VERSION);
        let steps = a["steps"].as_array().unwrap();
        let sources: Vec<&str> = steps.iter().map(|s| s["source"].as_str().unwrap()).collect();
        assert_eq!(sources, ["system", "user", "agent", "agent"]);
        assert_eq!(steps[2]["step_id"], 3);
        assert_eq!(steps[2]["tool_calls"][0]["function_name"], "bash");
        assert_eq!(steps[2]["observation"]["results"][0]["content"], "a.txt");
        assert!(steps[3].get("tool_calls").is_none());
        assert_eq!(a["final_metrics"]["total_prompt_tokens"], 30);
        assert_eq!(a["extra"]["end_reason"], "finished");
    }
}
