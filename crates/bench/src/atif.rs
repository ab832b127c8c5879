//! Export of our JSONL trajectories to ATIF (Agent Trajectory Interchange Format,
//! Harbor RFC 0001, v1.4): one JSON document with a system step, the user's
//! instruction, and one agent step per model turn carrying its tool calls, their
//! observations and its token metrics.

use serde_json::{json, Map, Value};

/// The schema version written.
pub const ATIF_VERSION: &str = "ATIF-v1.4";

/// Converts the lines of a trajectory JSONL file; unreadable lines are skipped (a
/// killed episode may end mid-line).
pub fn to_atif(jsonl: &str) -> Value {
    let lines: Vec<Value> = jsonl.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let start = lines.iter().find(|l| l["type"] == "episode_start").cloned().unwrap_or(Value::Null);
    let model = start["model"].as_str().unwrap_or("unknown").to_string();
    let mut steps: Vec<Value> = Vec::new();
    let mut push = |mut step: Map<String, Value>| {
        step.insert("step_id".into(), json!(steps.len() + 1));
        steps.push(Value::Object(step));
    };
    if let Some(sp) = start["system_prompt"].as_str() {
        push(obj(json!({"source": "system", "message": sp})));
    }
    let (mut prompt, mut completion) = (0u64, 0u64);
    for (i, turn) in lines.iter().filter(|l| l["type"] == "turn").enumerate() {
        // Later user messages are the observations, already attached to the agent step.
        if i == 0 {
            if let Some(text) = turn["user"]["content"].as_str() {
                push(obj(json!({"source": "user", "message": text})));
            }
        }
        let usage = &turn["usage"];
        prompt += usage["prompt_tokens"].as_u64().unwrap_or(0);
        completion += usage["completion_tokens"].as_u64().unwrap_or(0);
        let observations = turn["observations"].as_array().cloned().unwrap_or_default();
        let calls: Vec<Value> = observations
            .iter()
            .map(|o| json!({"tool_call_id": o["call_id"], "function_name": o["tool"], "arguments": o["args"]}))
            .collect();
        let results: Vec<Value> =
            observations.iter().map(|o| json!({"source_call_id": o["call_id"], "content": o["observation"]})).collect();
        let mut metrics = obj(json!({
            "prompt_tokens": usage["prompt_tokens"],
            "completion_tokens": usage["completion_tokens"],
        }));
        for key in ["prompt_token_ids", "completion_token_ids"] {
            if turn[key].is_array() {
                metrics.insert(key.into(), turn[key].clone());
            }
        }
        let mut step = obj(json!({
            "source": "agent",
            "model_name": model,
            "message": turn["assistant"],
            "metrics": metrics,
        }));
        if !calls.is_empty() {
            step.insert("tool_calls".into(), Value::Array(calls));
            step.insert("observation".into(), json!({ "results": results }));
        }
        if let Some(errors) = turn["parse_errors"].as_array().filter(|e| !e.is_empty()) {
            step.insert("extra".into(), json!({ "parse_errors": errors }));
        }
        push(step);
    }
    let end = lines.iter().find(|l| l["type"] == "episode_end");
    json!({
        "schema_version": ATIF_VERSION,
        "session_id": start["episode_id"],
        "agent": {"name": "agent", "version": env!("CARGO_PKG_VERSION"), "model_name": model},
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": prompt,
            "total_completion_tokens": completion,
            "total_steps": steps.len(),
        },
        "extra": {"end_reason": end.map(|e| e["reason"].clone()), "run_id": start["run_id"]},
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
            r#"{"type":"episode_start","episode_id":"e1","run_id":"r","model":"m","system_prompt":"be good"}"#,
            "\n",
            r#"{"type":"turn","turn":1,"user":{"role":"user","content":"do it"},"assistant":"<bash>..","usage":{"prompt_tokens":10,"completion_tokens":3},"observations":[{"call_id":"c1","tool":"bash","args":{"cmd":"ls"},"observation":"a.txt"}],"parse_errors":[]}"#,
            "\n",
            r#"{"type":"turn","turn":2,"user":{"role":"user","content":"<bash_output>"},"assistant":"done","usage":{"prompt_tokens":20,"completion_tokens":2},"observations":[]}"#,
            "\n{\"type\":\"episode_end\",\"reason\":\"finished\"}\n{truncated"
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
