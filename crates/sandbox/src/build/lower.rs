//! Lowering what an engine's builder cannot read: heredocs into files of the build
//! context (for Dockerfile frontends older than heredocs, and the classic builder), and
//! cache mounts into plain folders (the classic builder has no mounts).

use std::collections::BTreeMap;

use super::dockerfile::{shell_words, Dockerfile, Instruction, Item};
use super::vars::StageVars;

/// Files a rewritten Dockerfile needs in the build context: path → (bytes, mode).
pub type ContextFiles = BTreeMap<String, (Vec<u8>, u32)>;

/// Where lowered heredocs live in the build context.
pub const HEREDOC_DIR: &str = ".agent-heredocs";

/// How a heredoc `RUN` is lowered: a bind mount of the script (BuildKit's built-in
/// frontend before heredocs) or a copy removed after the run (the classic builder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lowering {
    BindMount,
    CopyAndRemove,
}

/// Rewrites heredocs into files of the build context, with BuildKit's meaning:
/// `COPY <<EOT /dest` copies the body as a file (named `EOT` when the destination is a
/// folder); `RUN <<EOF` runs the body as a script (by its `#!` line when it has one,
/// else by the stage's shell); `RUN cmd <<EOF …` hands the whole command, heredocs
/// included, to the shell, which expands unquoted bodies as it would.
pub fn lower_heredocs(df: &mut Dockerfile, how: Lowering) -> ContextFiles {
    let mut files = ContextFiles::new();
    let mut shell: Vec<String> = vec!["/bin/sh".into()];
    let mut vars = StageVars::default();
    let mut n = 0usize;
    let mut items = Vec::with_capacity(df.items.len());
    for item in std::mem::take(&mut df.items) {
        let Item::Instruction(ins) = item else {
            items.push(item);
            continue;
        };
        vars.apply(&ins);
        match ins.keyword.as_str() {
            "FROM" => shell = vec!["/bin/sh".into()],
            "SHELL" => {
                if let Ok(mut argv) = serde_json::from_str::<Vec<String>>(&ins.args) {
                    // The shell runs a script file, not a `-c` string.
                    if argv.last().is_some_and(|a| a == "-c") {
                        argv.pop();
                    }
                    if !argv.is_empty() {
                        shell = argv;
                    }
                }
            }
            _ => {}
        }
        if ins.heredocs.is_empty() {
            items.push(Item::Instruction(ins));
            continue;
        }
        let (flags, rest) = ins.flags_and_rest();
        let mut lowered: Vec<String> = Vec::new();
        if ins.keyword == "RUN" {
            n += 1;
            let name = format!("{HEREDOC_DIR}/{n}/run");
            let only_heredocs = shell_words(&rest).iter().all(|w| ins.heredocs.iter().any(|h| &h.token == w));
            let (script, direct) = if only_heredocs && ins.heredocs.len() == 1 {
                let body = ins.heredocs[0].content();
                let direct = body.starts_with("#!");
                (body, direct)
            } else {
                let mut s = rest.clone();
                s.push('\n');
                for l in ins.heredocs.iter().flat_map(|h| h.raw.iter()) {
                    s.push_str(l);
                    s.push('\n');
                }
                (s, false)
            };
            // Executable, so a `#!` script runs itself (bind mounts and the classic
            // builder's COPY keep the mode of the context file).
            files.insert(name.clone(), (script.into_bytes(), 0o755));
            let run = |path: &str| if direct { path.to_string() } else { format!("{} {path}", shell.join(" ")) };
            let mut words = flags.clone();
            match how {
                Lowering::BindMount => {
                    let target = format!("/run/agent-heredoc-{n}");
                    words.push(format!("--mount=type=bind,source={name},target={target}"));
                    words.push(run(&target));
                }
                Lowering::CopyAndRemove => {
                    let tmp = format!("/tmp/.agent-heredoc-{n}");
                    lowered.push(format!("COPY {name} {tmp}"));
                    words.push(format!("{}; s=$?; rm -f {tmp} 2>/dev/null; exit $s", run(&tmp)));
                }
            }
            lowered.push(format!("RUN {}", words.join(" ")));
        } else {
            let mut words = flags.clone();
            for w in rest.split_whitespace() {
                match ins.heredocs.iter().find(|h| h.token == w) {
                    Some(h) => {
                        n += 1;
                        let name = format!("{HEREDOC_DIR}/{n}/{}", h.word);
                        // An unquoted delimiter expands build variables, as BuildKit does.
                        let quoted = h.token.contains(['"', '\'']);
                        let content = if quoted { h.content() } else { vars.expand(&h.content()) };
                        files.insert(name.clone(), (content.into_bytes(), 0o644));
                        words.push(name);
                    }
                    None => words.push(w.to_string()),
                }
            }
            lowered.push(format!("{} {}", ins.keyword, words.join(" ")));
        }
        for line in lowered {
            let (keyword, args) = line.split_once(' ').unwrap_or((line.as_str(), ""));
            items.push(Item::Instruction(Instruction {
                keyword: keyword.to_string(),
                lines: vec![line.clone()],
                args: args.to_string(),
                heredocs: Vec::new(),
                line: ins.line,
            }));
        }
    }
    df.items = items;
    files
}

/// Drops `--mount=type=cache,…` flags from `RUN` (the classic builder has no mounts;
/// a cache mount only speeds up rebuilds). Returns the other mount flags it cannot
/// honour.
pub fn strip_cache_mounts(df: &mut Dockerfile) -> Vec<String> {
    let mut unsupported = Vec::new();
    for item in &mut df.items {
        let Item::Instruction(ins) = item else { continue };
        if ins.keyword != "RUN" {
            continue;
        }
        let (flags, rest) = ins.flags_and_rest();
        if !flags.iter().any(|f| f.starts_with("--mount")) {
            continue;
        }
        let mut kept = Vec::new();
        let mut targets = Vec::new();
        for f in flags {
            if let Some(spec) = f.strip_prefix("--mount=") {
                if spec.split(',').any(|kv| kv == "type=cache") {
                    let target = spec.split(',').find_map(|kv| {
                        kv.strip_prefix("target=")
                            .or_else(|| kv.strip_prefix("dst="))
                            .or_else(|| kv.strip_prefix("destination="))
                    });
                    targets.extend(target.map(str::to_string));
                    continue;
                }
                unsupported.push(format!("line {}: RUN {f}", ins.line));
            }
            kept.push(f);
        }
        // The command expects the cache folder to exist, and a cache is not part of the
        // image: a folder made for it is removed after the step (one the image already
        // had stays, as it would under the mount).
        let rest = if targets.is_empty() || rest.starts_with('[') {
            rest
        } else {
            let t = targets.join(" ");
            format!(
                "_agent_new=; for d in {t}; do [ -e \"$d\" ] || _agent_new=\"$_agent_new $d\"; done; mkdir -p {t} && ( {rest} ); _agent_s=$?; [ -z \"$_agent_new\" ] || rm -rf $_agent_new; exit $_agent_s"
            )
        };
        let mut line = String::from("RUN");
        for w in kept.iter().chain(std::iter::once(&rest)) {
            line.push(' ');
            line.push_str(w);
        }
        // Heredoc bodies stay attached to the instruction and follow the new line.
        ins.args = line["RUN ".len()..].to_string();
        ins.lines = vec![line];
    }
    unsupported
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# syntax=docker/dockerfile:1.4\n# escape=\\\nFROM python:3.13 AS base\n# a comment\nRUN apt-get update && \\\n    # inside\n    apt-get install -y jq\nCOPY <<EOT /app/hello.txt\nFROM not-an-instruction\nhi $HOME\nEOT\nRUN <<EOF\nset -e\necho one > /one\nEOF\nRUN python3 - <<'PY' > /out.txt\nprint('x')\nPY\nCOPY <<-EOT <<B2 /etc/dir/\n\t\tindented\n\tEOT\nsecond\nB2\nRUN echo \"<<NOT\" && cat <<<here\n";

    #[test]
    fn copy_heredocs_become_context_files() {
        let mut df = Dockerfile::parse(SAMPLE).unwrap();
        let files = lower_heredocs(&mut df, Lowering::BindMount);
        let text = df.render();
        assert!(text.contains("COPY .agent-heredocs/1/EOT /app/hello.txt\n"), "{text}");
        // Unquoted: build variables expand (HOME is none of them, so it is empty).
        assert_eq!(files[".agent-heredocs/1/EOT"], (b"FROM not-an-instruction\nhi \n".to_vec(), 0o644));
        assert!(text.contains("COPY .agent-heredocs/4/EOT .agent-heredocs/5/B2 /etc/dir/\n"), "{text}");
        assert_eq!(files[".agent-heredocs/4/EOT"].0, b"indented\n");
        // The lowered file has no heredoc left, so an old frontend reads it.
        assert!(!Dockerfile::parse(&text).unwrap().has_heredocs());
        assert_eq!(Dockerfile::parse(&text).unwrap().base_images(), ["python:3.13"]);
    }

    #[test]
    fn run_heredocs_become_scripts_run_by_the_shell() {
        let mut df = Dockerfile::parse(SAMPLE).unwrap();
        let files = lower_heredocs(&mut df, Lowering::BindMount);
        let text = df.render();
        assert!(
            text.contains("RUN --mount=type=bind,source=.agent-heredocs/2/run,target=/run/agent-heredoc-2 /bin/sh /run/agent-heredoc-2\n"),
            "{text}"
        );
        assert_eq!(files[".agent-heredocs/2/run"], (b"set -e\necho one > /one\n".to_vec(), 0o755));
        // A command with a heredoc goes to the shell whole, heredoc syntax included.
        assert_eq!(files[".agent-heredocs/3/run"].0, b"python3 - <<'PY' > /out.txt\nprint('x')\nPY\n");
    }

    #[test]
    fn a_shebang_script_runs_itself_and_shell_changes_apply() {
        let src = "FROM a\nSHELL [\"/bin/bash\", \"-o\", \"pipefail\", \"-c\"]\nRUN --network=none <<EOF\necho $BASH\nEOF\nRUN <<EOF\n#!/usr/bin/env python3\nprint(1)\nEOF\n";
        let mut df = Dockerfile::parse(src).unwrap();
        lower_heredocs(&mut df, Lowering::BindMount);
        let text = df.render();
        assert!(text.contains("RUN --network=none --mount=type=bind,source=.agent-heredocs/1/run,target=/run/agent-heredoc-1 /bin/bash -o pipefail /run/agent-heredoc-1\n"), "{text}");
        assert!(text.contains("target=/run/agent-heredoc-2 /run/agent-heredoc-2\n"), "{text}");
    }

    #[test]
    fn the_classic_lowering_copies_the_script_and_removes_it() {
        let mut df = Dockerfile::parse("FROM a\nRUN <<EOF\nexit 3\nEOF\n").unwrap();
        lower_heredocs(&mut df, Lowering::CopyAndRemove);
        let text = df.render();
        assert!(text.contains("COPY .agent-heredocs/1/run /tmp/.agent-heredoc-1\nRUN /bin/sh /tmp/.agent-heredoc-1; s=$?; rm -f /tmp/.agent-heredoc-1 2>/dev/null; exit $s\n"), "{text}");
    }

    #[test]
    fn cache_mounts_are_dropped_for_the_classic_builder_and_others_named() {
        let mut df = Dockerfile::parse(
            "FROM a\nRUN --mount=type=cache,target=/root/.cache pip install x\nRUN --mount=type=secret,id=t cat /run/secrets/t\n",
        )
        .unwrap();
        let unsupported = strip_cache_mounts(&mut df);
        let text = df.render();
        assert!(
            text.contains("RUN _agent_new=; for d in /root/.cache; do [ -e \"$d\" ] || _agent_new=\"$_agent_new $d\"; done; mkdir -p /root/.cache && ( pip install x ); _agent_s=$?; [ -z \"$_agent_new\" ] || rm -rf $_agent_new; exit $_agent_s\n"),
            "{text}"
        );
        assert_eq!(unsupported, ["line 3: RUN --mount=type=secret,id=t"]);
    }

    #[test]
    fn unquoted_copy_heredocs_expand_build_variables_and_quoted_ones_do_not() {
        let src = "FROM a\nARG NAME=world\nENV DIR=/srv\nCOPY <<EOT /a\nhello $NAME in ${DIR}\nEOT\nCOPY <<'EOT' /b\nhello $NAME\nEOT\n";
        let mut df = Dockerfile::parse(src).unwrap();
        let files = lower_heredocs(&mut df, Lowering::BindMount);
        assert_eq!(files[".agent-heredocs/1/EOT"].0, b"hello world in /srv\n");
        assert_eq!(files[".agent-heredocs/2/EOT"].0, b"hello $NAME\n");
    }
}
