use super::*;

fn streamed(deltas: &[&str]) -> CallFilter {
    let mut f = CallFilter::new();
    for d in deltas {
        f.push(d);
    }
    f.finish();
    f
}

fn raws(f: &CallFilter) -> Vec<&str> {
    f.calls().map(|c| c.raw.as_str()).collect()
}

const NATIVE: &str = "I'll list the files.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>\nThat is all.";

#[test]
fn a_native_call_is_held_apart_from_the_prose_around_it() {
    let f = CallFilter::from_text(NATIVE);
    assert_eq!(f.prose(), "I'll list the files.\n\nThat is all.");
    assert_eq!(raws(&f), vec!["<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>"]);
    let call = f.calls().next().unwrap();
    assert!(call.closed && !call.shown);
    assert_eq!(call.tool().as_deref(), Some("bash"));
    assert_eq!(f.text(), NATIVE, "nothing is lost");
}

#[test]
fn an_opener_split_across_deltas_is_held_back_until_it_is_whole() {
    let mut f = CallFilter::new();
    f.push("Let me look.\n<tool");
    assert_eq!(f.prose(), "Let me look.\n", "`<tool` may open a call: not drawn yet");
    f.push("_call>\n{\"name\": \"bash\", ");
    assert_eq!(f.prose(), "Let me look.\n");
    assert_eq!(raws(&f), vec!["<tool_call>\n{\"name\": \"bash\", "]);
    f.push("\"arguments\": {\"cmd\": \"ls\"}}\n</tool");
    f.push("_call>\nDone.");
    assert_eq!(f.prose(), "Let me look.\n\nDone.");
    assert!(f.calls().next().unwrap().closed);
    // `<to` that turns out to be prose is drawn once the next delta shows it.
    let mut f = CallFilter::new();
    f.push("a <to");
    assert_eq!(f.prose(), "a ");
    f.push("ol> b");
    assert_eq!(f.prose(), "a <tool> b");
}

/// Whatever the deltas, the pieces are those of the whole reply, and no delta ever
/// draws part of a call.
#[test]
fn every_split_of_a_reply_gives_the_same_pieces() {
    let replies = [
        NATIVE,
        "Run:\n<bash>\ncmd: ls\n</bash>\nthen\n<finish>\nmessage: done\n</finish>\n",
        "Here:\n```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n```\nok",
        "<think>maybe <tool_call> later</think>Now:\n<tool_call>{\"name\": \"finish\"}</tool_call>",
    ];
    for reply in replies {
        let whole = CallFilter::from_text(reply);
        let bounds: Vec<usize> = (0..=reply.len()).filter(|&i| reply.is_char_boundary(i)).collect();
        for &i in &bounds {
            for &j in bounds.iter().filter(|&&j| j >= i) {
                let mut f = CallFilter::new();
                for part in [&reply[..i], &reply[i..j], &reply[j..]] {
                    f.push(part);
                    let p = f.prose();
                    assert!(!p.contains("\"name\"") && !p.contains("cmd:"), "{i}/{j}: a call drawn: {p:?}");
                }
                f.finish();
                assert_eq!(f, whole, "split at {i} and {j} of {reply:?}");
            }
        }
    }
}

#[test]
fn several_calls_each_are_held_apart() {
    let f = CallFilter::from_text(
        "First.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>\nSecond.\n<tool_call>\n{\"name\": \"finish\", \"arguments\": {\"message\": \"ok\"}}\n</tool_call>",
    );
    assert_eq!(f.prose(), "First.\n\nSecond.\n");
    let tools: Vec<_> = f.calls().map(|c| c.tool()).collect();
    assert_eq!(tools, vec![Some("bash".to_string()), Some("finish".to_string())]);
}

#[test]
fn an_unclosed_call_runs_to_the_end() {
    let f = streamed(&["Ok.\n<tool_call>\n{\"name\": \"bash\", \"argu"]);
    assert_eq!(f.prose(), "Ok.\n");
    let call = f.calls().next().unwrap();
    assert!(!call.closed);
    assert_eq!(call.raw, "<tool_call>\n{\"name\": \"bash\", \"argu");
    // A held-back closer start stays part of the call at the end.
    let f = streamed(&["<tool_call>{}</tool_"]);
    assert_eq!(raws(&f), vec!["<tool_call>{}</tool_"]);
    assert_eq!(f.prose(), "");
}

#[test]
fn held_back_text_is_prose_when_the_reply_ends() {
    let mut f = CallFilter::new();
    f.push("The tag is <tool_");
    assert_eq!(f.prose(), "The tag is ");
    f.finish();
    assert_eq!(f.prose(), "The tag is <tool_");
    assert_eq!(f.calls().count(), 0);
    assert_eq!(streamed(&["x\n<ba"]).prose(), "x\n<ba");
    assert_eq!(streamed(&["x\n``"]).prose(), "x\n``");
}

#[test]
fn a_malformed_call_is_revealed_and_a_read_one_hidden_again() {
    let mut f = CallFilter::from_text(
        "Try.\n<tool_call>\n{\"name\": \"bsah\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>",
    );
    assert!(f.calls().all(|c| !c.shown), "hidden until the core says it could not read them");
    assert!(f.reveal_calls());
    assert!(f.calls().all(|c| c.shown));
    // The core ran the bash call: only the bad one stays drawn.
    assert!(f.hide_call_of("bash"));
    let shown: Vec<_> = f.calls().map(|c| c.shown).collect();
    assert_eq!(shown, vec![true, false]);
    assert!(!f.hide_call_of("bash"), "no other bash call is drawn");
    assert!(!CallFilter::from_text("no calls here").reveal_calls());
}

#[test]
fn text_format_tags_open_calls_at_a_line_start() {
    let f =
        streamed(&["Let me look.\n<ba", "sh>\ncmd: ls\n</ba", "sh>\nThen more.\n  <finish>\nmessage: x\n</finish>"]);
    assert_eq!(f.prose(), "Let me look.\n\nThen more.\n");
    assert_eq!(raws(&f), vec!["<bash>\ncmd: ls\n</bash>", "  <finish>\nmessage: x\n</finish>"]);
    let tools: Vec<_> = f.calls().filter_map(CallText::tool).collect();
    assert_eq!(tools, vec!["bash", "finish"]);
    // An MCP tool's tag is a call too.
    let f = CallFilter::from_text("<github__search>\nquery: x\n</github__search>\n");
    assert_eq!(f.calls().count(), 1);
    // A tag in the middle of prose, a tag that names no tool, HTML: prose.
    for prose in ["I will use the <bash> tool.", "<python>\nprint(1)\n</python>", "<b>bold</b> and <br>"] {
        let f = CallFilter::from_text(prose);
        assert_eq!((f.prose().as_str(), f.calls().count()), (prose, 0));
    }
}

#[test]
fn a_fenced_json_call_object_is_a_call() {
    let f =
        streamed(&["Here:\n``", "`json\n{\"na", "me\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n``", "`\nAfter."]);
    assert_eq!(f.prose(), "Here:\nAfter.");
    assert_eq!(raws(&f), vec!["```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n```\n"]);
    assert_eq!(f.calls().next().unwrap().tool().as_deref(), Some("bash"));
    // Pretty-printed, and in a bare fence.
    let f = CallFilter::from_text("```\n{\n  \"name\": \"finish\",\n  \"arguments\": {}\n}\n```");
    assert_eq!((f.prose(), f.calls().count()), (String::new(), 1));
    // While the block's start is undecided, nothing of it is drawn.
    let mut f = CallFilter::new();
    f.push("See:\n```json\n{\"name\": \"ba");
    assert_eq!(f.prose(), "See:\n");
}

#[test]
fn a_json_block_that_is_not_a_call_stays_prose() {
    for text in [
        "```json\n{\"name\": \"my-package\", \"version\": \"1.0.0\"}\n```\n",
        "```json\n[1, 2]\n```\n",
        "```json\n{\"version\": 1}\n```\n",
        "```rust\nfn main() {}\n```\n",
        "```\n```\n",
    ] {
        let f = CallFilter::from_text(text);
        assert_eq!((f.prose().as_str(), f.calls().count()), (text, 0));
    }
    // An unended probe at the reply's end is prose.
    assert_eq!(streamed(&["```json\n"]).prose(), "```json\n");
}

#[test]
fn a_code_block_closes_before_a_call_object_can_follow() {
    // The bare fence closes the rust block; it does not open a call (nor does the object
    // after it: after a fence the core reads calls only in blocks).
    let text = "```rust\nlet x = 1;\n```\n{\"name\": \"bash\"}\n";
    let f = CallFilter::from_text(text);
    assert_eq!((f.prose().as_str(), f.calls().count()), (text, 0));
    // A call inside an ordinary block is still a call; the block is left empty.
    let f = CallFilter::from_text("Run:\n```\n<bash>\ncmd: ls\n</bash>\n```\n");
    assert_eq!(f.prose(), "Run:\n```\n\n```\n");
    assert_eq!(f.calls().count(), 1);
}

#[test]
fn think_blocks_pass_through_and_open_no_calls() {
    let f = streamed(&["<thi", "nk>I could write <tool_call> or\n<bash>\n here</th", "ink>Answer."]);
    assert_eq!(f.calls().count(), 0);
    assert_eq!(f.prose(), "<think>I could write <tool_call> or\n<bash>\n here</think>Answer.");
    let mut f = CallFilter::new();
    f.push("<think>plan");
    assert_eq!(f.prose(), "<think>plan", "thinking streams as it comes");
    f.push("</think>\n<tool_call>{\"name\": \"bash\"}</tool_call>");
    assert_eq!(f.prose(), "<think>plan</think>\n");
    assert_eq!(f.calls().count(), 1);
}

#[test]
fn tool_names_are_the_builtin_ones_and_mcp_ones() {
    let builtin = agent_core::tools::ToolSpecs::builtin().unwrap();
    for name in builtin.names() {
        assert!(is_tool_name(name), "{name}");
    }
    assert_eq!(builtin.names().len(), BUILTIN_TOOLS.len(), "a built-in tool is missing here");
    assert!(is_tool_name("github__search_issues"));
    assert!(!is_tool_name("python") && !is_tool_name("tool_call") && !is_tool_name("think"));
}

#[test]
fn a_call_object_starting_a_line_is_a_call_to_its_balancing_brace() {
    // Pretty-printed and streamed in pieces, with braces inside its strings.
    let reply = "I will check.\n{\n  \"name\": \"bash\",\n  \"arguments\": {\"cmd\": \"echo '}' && awk '{print $1}' f\"}\n} then wait\nDone.";
    let whole = CallFilter::from_text(reply);
    assert_eq!(whole.prose(), "I will check.\n then wait\nDone.");
    assert_eq!(
        raws(&whole),
        vec!["{\n  \"name\": \"bash\",\n  \"arguments\": {\"cmd\": \"echo '}' && awk '{print $1}' f\"}\n}"]
    );
    assert_eq!(whole.calls().next().unwrap().tool().as_deref(), Some("bash"));
    assert!(whole.calls().next().unwrap().closed);
    for at in 1..reply.len() {
        if !reply.is_char_boundary(at) {
            continue;
        }
        let f = streamed(&[&reply[..at], &reply[at..]]);
        assert_eq!(f.pieces(), whole.pieces(), "split at {at}");
    }
    // While its start is undecided, nothing of it is drawn.
    let mut f = CallFilter::new();
    f.push("Now:\n{\"na");
    assert_eq!(f.prose(), "Now:\n");
    // Objects that are not calls, and calls after a fence (the core reads only blocks
    // then), are prose.
    for text in
        ["{\"version\": 1}\n", "{\"name\": \"my-package\"}\n", "```rust\nlet x = 1;\n```\n{\"name\": \"bash\"}\n"]
    {
        let f = CallFilter::from_text(text);
        assert_eq!((f.prose().as_str(), f.calls().count()), (text, 0), "{text}");
    }
}

#[test]
fn what_the_core_did_not_run_is_revealed_when_it_is_done_with_the_reply() {
    let mut f = CallFilter::from_text(
        "<tool_call>{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}</tool_call>\n{\"name\": \"finish\", \"oops\": 1}",
    );
    assert!(f.hide_call_of("bash"), "the core runs the bash call");
    assert!(f.reveal_unread(), "the object it took for prose is drawn");
    let shown: Vec<bool> = f.calls().map(|c| c.shown).collect();
    assert_eq!(shown, vec![false, true]);
    assert!(!f.reveal_unread(), "nothing more to reveal");
    // A parse error revealed both; the one the core then ran is its cell only.
    let mut f = CallFilter::from_text(
        "<tool_call>{\"name\": \"bsah\"}</tool_call>\n<tool_call>{\"name\": \"bash\", \"arguments\": {}}</tool_call>",
    );
    f.reveal_calls();
    assert!(f.hide_call_of("bash"));
    assert_eq!(f.calls().map(|c| (c.shown, c.read)).collect::<Vec<_>>(), vec![(true, false), (false, true)]);
}
