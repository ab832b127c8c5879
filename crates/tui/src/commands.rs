//! What each slash command does to the UI state.

use agent_protocol::{ApprovalMode, Op};

use super::app::{App, Effect};
use super::cell::CellKind;
use super::popup::SLASH_COMMANDS;

/// The request `/init` sends.
const INIT_PROMPT: &str = "Explore this project (in /workspace) and write /workspace/AGENTS.md: a short guide for coding agents with the project's purpose, layout, how to build, test and lint it, and its conventions. Keep it under 60 lines; then finish.";

const KEYS_HELP: &str = "keys: Enter send · Shift+Enter or Ctrl+J new line · Up/Down history · Esc interrupt · Ctrl+C clear, twice quit\n      Shift+Tab approval mode · Ctrl+O expand output and thinking · PgUp/PgDn scroll · !cmd shell · @path file";

/// Runs a slash command line such as `/model default`.
pub fn run_slash(app: &mut App, line: &str) -> Vec<Effect> {
    let mut words = line.trim_start_matches('/').splitn(2, char::is_whitespace);
    let name = words.next().unwrap_or_default();
    let arg = words.next().map(str::trim).filter(|a| !a.is_empty());
    match name {
        "help" => {
            let mut text = String::from("commands:\n");
            for c in SLASH_COMMANDS {
                text.push_str(&format!("  /{:<9} {}\n", c.name, c.help));
            }
            for c in &app.commands {
                text.push_str(&format!("  /{:<9} {}\n", c.name, c.popup_line()));
            }
            text.push_str(KEYS_HELP);
            if let Some(log) = &app.log_file {
                text.push_str(&format!("\nlog: {log} (warnings and errors while the UI runs)"));
            }
            app.info(text);
            Vec::new()
        }
        "clear" => {
            app.transcript.clear();
            app.transcript.push(CellKind::Info { text: "transcript cleared; a fresh context starts".into() });
            vec![Effect::Restart { model: None, keep_conversation: false }]
        }
        "compact" => {
            app.info("compacting the history…");
            vec![Effect::Op(Op::Compact)]
        }
        "model" => match arg {
            None => {
                app.info(format!("model: {} (switch with /model SPEC, e.g. /model default)", app.status.model));
                Vec::new()
            }
            Some(spec) => {
                app.info(format!("switching to {spec}… (the conversation carries over)"));
                vec![Effect::Restart { model: Some(spec.to_string()), keep_conversation: true }]
            }
        },
        "approval" => {
            let mode = match arg {
                None => {
                    app.info(format!(
                        "approval mode: {} (change with /approval ask|auto-edit|auto|plan, or Shift+Tab)",
                        app.mode.name()
                    ));
                    return Vec::new();
                }
                Some("ask") => ApprovalMode::Ask,
                Some("auto-edit") => ApprovalMode::AutoEdit,
                Some("auto") => ApprovalMode::Auto,
                Some("plan") => ApprovalMode::Plan,
                Some(other) => {
                    app.error(format!("unknown approval mode `{other}` (ask, auto-edit, auto, plan)"));
                    return Vec::new();
                }
            };
            let effects = app.set_mode(mode);
            app.info(format!("approval mode: {}", mode.name()));
            effects
        }
        "mcp" => vec![Effect::ShowMcp],
        "skills" => vec![Effect::ShowSkills],
        "rewind" => {
            app.open_rewind();
            Vec::new()
        }
        "resume" => match arg {
            None => vec![Effect::ListSessions],
            Some(id) => vec![Effect::Resume { id: id.to_string() }],
        },
        "todo" => {
            let text = app
                .last_todo
                .clone()
                .map(|t| strip_wrapper(&t))
                .unwrap_or_else(|| "(the agent has no todo list yet)".into());
            app.info(text);
            Vec::new()
        }
        "cost" => {
            let s = &app.status;
            let text = format!(
                "tokens: {} prompt + {} completion = {} · turns: {} · time: {}s",
                s.total.prompt_tokens,
                s.total.completion_tokens,
                s.total.prompt_tokens + s.total.completion_tokens,
                s.turns,
                s.started.elapsed().as_secs()
            );
            app.info(text);
            Vec::new()
        }
        "init" => app.user_turn(INIT_PROMPT.to_string()),
        "quit" | "exit" => {
            app.should_quit = true;
            vec![Effect::Quit]
        }
        other => match app.commands.iter().find(|c| c.name == other) {
            // The transcript shows the command as typed; the model gets the prompt.
            Some(c) => {
                let prompt = c.expand(arg.unwrap_or(""));
                app.user_turn_shown(prompt, line.trim().to_string())
            }
            None => {
                app.error(format!("unknown command /{other} (see /help)"));
                Vec::new()
            }
        },
    }
}

/// The list from the last `todo` observation: without its wrapper and without the line
/// that reported the change ("added #3").
fn strip_wrapper(obs: &str) -> String {
    let list = obs.trim().trim_start_matches("<todo_output>").trim_end_matches("</todo_output>").trim();
    let first = list.lines().next().unwrap_or_default();
    let list = if ["added #", "completed #", "deleted #"].iter().any(|p| first.starts_with(p)) {
        list.split_once('\n').map(|(_, rest)| rest).unwrap_or_default()
    } else {
        list
    };
    list.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::AppConfig;

    fn app() -> App {
        App::new(AppConfig {
            model: "m".into(),
            workspace: "/w".into(),
            approval: ApprovalMode::Auto,
            context_tokens: 1000,
            files: Vec::new(),
            commands: Vec::new(),
            log_file: None,
        })
    }

    fn last_text(app: &App) -> String {
        match app.transcript.cells().next_back() {
            Some(CellKind::Info { text } | CellKind::Error { text }) => text.clone(),
            other => panic!("expected a message cell, got {other:?}"),
        }
    }

    #[test]
    fn a_custom_command_sends_its_prompt_and_shows_what_was_typed() {
        use super::super::custom_commands::{parse, Scope};
        let mut a = app();
        a.commands = vec![parse("fix", "Fix issue #$1, then run $ARGUMENTS-free tests.", Scope::Project)];
        let effects = run_slash(&mut a, "/fix 42");
        assert_eq!(effects, vec![Effect::Op(Op::UserTurn { text: "Fix issue #42, then run 42-free tests.".into() })]);
        assert!(matches!(a.transcript.cells().next_back(), Some(CellKind::User { text }) if text == "/fix 42"));
        run_slash(&mut a, "/help");
        assert!(last_text(&a).contains("/fix"), "{}", last_text(&a));
        run_slash(&mut a, "/nope");
        assert!(last_text(&a).contains("unknown command /nope"));
    }

    #[test]
    fn commands_map_to_effects() {
        let mut a = app();
        assert_eq!(run_slash(&mut a, "/compact"), vec![Effect::Op(Op::Compact)]);
        assert_eq!(
            run_slash(&mut a, "/model default"),
            vec![Effect::Restart { model: Some("default".into()), keep_conversation: true }]
        );
        assert_eq!(run_slash(&mut a, "/resume abc"), vec![Effect::Resume { id: "abc".into() }]);
        assert_eq!(run_slash(&mut a, "/quit"), vec![Effect::Quit]);
        assert!(run_slash(&mut a, "/approval ask").is_empty());
        assert_eq!(a.mode, ApprovalMode::Ask);
        // Bare `/approval` shows the mode; it does not change it.
        run_slash(&mut a, "/approval");
        assert_eq!(a.mode, ApprovalMode::Ask);
        assert!(last_text(&a).starts_with("approval mode: ask"), "{}", last_text(&a));
        run_slash(&mut a, "/todo");
        assert!(last_text(&a).contains("no todo list"));
        a.last_todo = Some("<todo_output>\nadded #2\n[ ] #1 a\n[ ] #2 b\n</todo_output>".into());
        run_slash(&mut a, "/todo");
        assert_eq!(last_text(&a), "[ ] #1 a\n[ ] #2 b");
        run_slash(&mut a, "/cost");
        assert!(last_text(&a).starts_with("tokens: 0 prompt"));
        run_slash(&mut a, "/help");
        assert!(last_text(&a).contains("/resume"));
        run_slash(&mut a, "/nope");
        assert!(last_text(&a).contains("unknown command"));
        let fx = run_slash(&mut a, "/init");
        assert!(matches!(&fx[..], [Effect::Op(Op::UserTurn { text })] if text.contains("AGENTS.md")));
    }
}
