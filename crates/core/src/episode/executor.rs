//! Runs parsed actions against the sandbox and renders observations.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::mcp::McpHub;
use crate::skills::Skills;
use crate::tools::Action;
use agent_sandbox::{resolve_path, sanitize, FileData, FileKind, OutputCollector, SandboxError, Shell};

use super::todo::TodoList;

/// What running one action produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// The observation block the model sees (`<TOOL_output>…</TOOL_output>`).
    pub observation: String,
    /// Exit code for bash; 0 or 1 for the other tools.
    pub exit_code: Option<i64>,
    pub timed_out: bool,
    pub interrupted: bool,
    /// Set when the action was `finish`.
    pub finish: Option<String>,
    /// A unified-style diff for file changes (for front ends).
    pub diff: Option<String>,
}

impl ToolOutcome {
    fn ok(tool: &str, body: impl AsRef<str>) -> Self {
        Self::with_code(tool, body, 0)
    }

    fn err(tool: &str, body: impl AsRef<str>) -> Self {
        Self::with_code(tool, format!("error: {}", body.as_ref()), 1)
    }

    fn with_code(tool: &str, body: impl AsRef<str>, code: i64) -> Self {
        ToolOutcome {
            observation: wrap(tool, body.as_ref()),
            exit_code: Some(code),
            timed_out: false,
            interrupted: false,
            finish: None,
            diff: None,
        }
    }
}

fn wrap(tool: &str, body: &str) -> String {
    format!("<{tool}_output>\n{}\n</{tool}_output>", body.trim_end_matches('\n'))
}

/// Runs tools in one sandbox; holds the persistent shell and the agent's notes.
pub struct ToolExecutor {
    shell: Shell,
    default_timeout: Duration,
    max_output: usize,
    todos: TodoList,
    scratchpad: String,
    background_jobs: u32,
    /// The MCP servers whose tools the model may call.
    mcp: Option<Arc<McpHub>>,
    /// The skills the `skill` tool loads; `None` when none are offered.
    skills: Option<Arc<Skills>>,
}

fn str_arg<'a>(args: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

fn int_arg(args: &Map<String, Value>, key: &str) -> Option<i64> {
    args.get(key).and_then(Value::as_i64)
}

fn bool_arg(args: &Map<String, Value>, key: &str) -> bool {
    args.get(key).and_then(Value::as_bool).unwrap_or(false)
}

impl ToolExecutor {
    /// An executor over a started shell.
    pub fn new(shell: Shell, default_timeout: Duration, max_output: usize) -> Self {
        Self {
            shell,
            default_timeout,
            max_output,
            todos: TodoList::default(),
            scratchpad: String::new(),
            background_jobs: 0,
            mcp: None,
            skills: None,
        }
    }

    /// Hands the skills the `skill` tool loads to this executor.
    pub fn set_skills(&mut self, skills: Option<Arc<Skills>>) {
        self.skills = skills;
    }

    /// Hands the MCP servers' tools to this executor.
    pub fn set_mcp(&mut self, mcp: Option<Arc<McpHub>>) {
        self.mcp = mcp;
    }

    /// The MCP servers, if any.
    pub fn mcp(&self) -> Option<&Arc<McpHub>> {
        self.mcp.as_ref()
    }

    /// The shell (for its sandbox and working directory).
    pub fn shell(&self) -> &Shell {
        &self.shell
    }

    /// The shell, for a caller that goes on using it after the episode (a bench trial
    /// whose tests run in the agent's own shell session).
    pub fn into_shell(self) -> Shell {
        self.shell
    }

    /// The agent's todo list.
    pub fn todos(&self) -> &TodoList {
        &self.todos
    }

    /// Runs one action. Infrastructure failures (the engine is gone) are errors; tool
    /// failures (a missing file, a failing command) are observations.
    pub async fn execute(
        &mut self,
        action: &Action,
        cancel: &CancellationToken,
        on_output: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ToolOutcome, SandboxError> {
        let args = &action.args;
        let outcome = match action.tool.as_str() {
            "bash" => self.bash(args, cancel, on_output).await,
            "file" => match self.file(args).await {
                Err(SandboxError::File { path, reason }) => Ok(ToolOutcome::err("file", format!("{path}: {reason}"))),
                other => other,
            },
            "search" => self.search(args).await,
            "todo" => Ok(self.todo(args)),
            "scratchpad" => Ok(self.scratchpad(args)),
            "skill" if self.skills.is_some() => {
                let name = str_arg(args, "name").unwrap_or_default();
                let skills = self.skills.as_deref().map(|s| crate::skills::load_skill(s, name));
                Ok(match skills {
                    Some(Ok(text)) => ToolOutcome::ok("skill", text),
                    Some(Err(e)) => ToolOutcome::err("skill", e),
                    None => ToolOutcome::err("skill", "no skills are offered"),
                })
            }
            "finish" => {
                let message = str_arg(args, "message").unwrap_or_default().to_string();
                let mut out = ToolOutcome::ok("finish", "the episode ends");
                out.finish = Some(message);
                Ok(out)
            }
            other => match &self.mcp {
                Some(mcp) if mcp.owns(other) => {
                    let (text, failed) = tokio::select! {
                        r = mcp.call(other, args) => r,
                        _ = cancel.cancelled() => ("the call was interrupted by the user".to_string(), true),
                    };
                    let mut out = ToolOutcome::with_code(other, &text, i64::from(failed));
                    if failed {
                        out.observation = wrap(other, &format!("error: {text}"));
                    }
                    Ok(out)
                }
                _ => Ok(ToolOutcome::err(other, format!("unknown tool `{other}`"))),
            },
        };
        if matches!(action.tool.as_str(), "bash" | "file") {
            // A clone: a borrow of the shell (not `Sync`) may not live across the await.
            let sandbox = self.shell.sandbox().clone();
            sandbox.restore_ownership().await;
        }
        outcome
    }

    async fn bash(
        &mut self,
        args: &Map<String, Value>,
        cancel: &CancellationToken,
        on_output: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ToolOutcome, SandboxError> {
        let cmd = str_arg(args, "cmd").unwrap_or_default();
        let timeout = int_arg(args, "timeout_secs")
            .filter(|t| *t > 0)
            .map(|t| Duration::from_secs(t as u64))
            .unwrap_or(self.default_timeout);
        if bool_arg(args, "background") {
            self.background_jobs += 1;
            let log = format!("/tmp/agent-bg-{}.log", self.background_jobs);
            let wrapped = format!(
                "{{ eval {} ; }} > {log} 2>&1 < /dev/null &\necho \"started in the background: pid $!, output in {log}\"",
                agent_sandbox::shell_quote(cmd)
            );
            let res = self.shell.run(&wrapped, Duration::from_secs(30), cancel, &mut |_| {}).await?;
            return Ok(ToolOutcome::with_code("bash", res.output, res.exit_code.unwrap_or(-1)));
        }
        let mut forward = |bytes: &[u8]| on_output(&sanitize(bytes));
        let res = self.shell.run(cmd, timeout, cancel, &mut forward).await?;
        let mut body = res.output.clone();
        if !body.is_empty() && !body.ends_with('\n') {
            body.push('\n');
        }
        let secs = res.duration.as_secs_f64();
        let status = if res.timed_out {
            format!(
                "[timed out after {:.0} s: the command was killed; the shell is still usable]",
                timeout.as_secs_f64()
            )
        } else if res.interrupted {
            "[interrupted by the user: the command was killed]".to_string()
        } else {
            match res.exit_code {
                Some(c) => format!("[exit code {c}, {secs:.1} s]"),
                None => "[no exit code]".to_string(),
            }
        };
        body.push_str(&status);
        if let Some(n) = &res.notice {
            body.push_str(&format!("\n[sandbox: {n}]"));
        }
        let mut out = ToolOutcome::with_code("bash", body, res.exit_code.unwrap_or(-1));
        out.timed_out = res.timed_out;
        out.interrupted = res.interrupted;
        if res.timed_out || res.interrupted {
            out.exit_code = res.exit_code;
        }
        Ok(out)
    }

    fn path(&self, args: &Map<String, Value>) -> String {
        resolve_path(self.shell.cwd(), str_arg(args, "path").unwrap_or("."))
    }

    async fn file(&mut self, args: &Map<String, Value>) -> Result<ToolOutcome, SandboxError> {
        let path = self.path(args);
        let sandbox = self.shell.sandbox().clone();
        match str_arg(args, "action").unwrap_or("read") {
            "read" => {
                let data = sandbox.read_file(&path).await?;
                Ok(render_read(&data, int_arg(args, "offset"), int_arg(args, "limit")))
            }
            "write" => {
                let content = str_arg(args, "content").unwrap_or_default();
                let existing = sandbox.read_file(&path).await.ok();
                if let Some(FileData { kind: FileKind::Directory, .. }) = existing {
                    // Small models read "in the current directory" as `path: .`: say what
                    // the path must be instead of only what it is.
                    let example = format!("{}/NAME", path.trim_end_matches('/'));
                    return Ok(ToolOutcome::err(
                        "file",
                        format!("{path} is a directory; `path` must be the file's own path, such as {example}"),
                    ));
                }
                sandbox.write_file(&path, content.as_bytes(), existing.as_ref()).await?;
                let verb = if existing.is_some() { "overwrote" } else { "created" };
                let mut out = ToolOutcome::ok("file", format!("{verb} {path} ({} bytes)", content.len()));
                out.diff = Some(diff_summary(
                    existing.as_ref().map(|d| d.bytes.as_slice()).unwrap_or(b""),
                    content.as_bytes(),
                ));
                Ok(out)
            }
            action @ ("edit" | "multi_edit") => {
                let edits: Vec<(String, String, bool)> = if action == "edit" {
                    vec![(
                        str_arg(args, "old_string").unwrap_or_default().to_string(),
                        str_arg(args, "new_string").unwrap_or_default().to_string(),
                        bool_arg(args, "replace_all"),
                    )]
                } else {
                    args.get("edits")
                        .and_then(Value::as_array)
                        .map(|list| {
                            list.iter()
                                .filter_map(Value::as_object)
                                .map(|e| {
                                    (
                                        str_arg(e, "old_string").unwrap_or_default().to_string(),
                                        str_arg(e, "new_string").unwrap_or_default().to_string(),
                                        bool_arg(e, "replace_all"),
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default()
                };
                let data = sandbox.read_file(&path).await?;
                if data.kind != FileKind::File {
                    return Ok(ToolOutcome::err("file", format!("{path} is not a regular file")));
                }
                let mut bytes = data.bytes.clone();
                let mut replaced = 0;
                for (i, (old, new, all)) in edits.iter().enumerate() {
                    let which = if edits.len() > 1 { format!("edit {}: ", i + 1) } else { String::new() };
                    match apply_edit(&bytes, old.as_bytes(), new.as_bytes(), *all) {
                        Ok((next, n)) => {
                            bytes = next;
                            replaced += n;
                        }
                        Err(why) => {
                            return Ok(ToolOutcome::err(
                                "file",
                                format!("{which}{why} in {path}; the file was not changed"),
                            ))
                        }
                    }
                }
                sandbox.write_file(&path, &bytes, Some(&data)).await?;
                let mut out = ToolOutcome::ok("file", format!("edited {path}: {replaced} replacement(s)"));
                out.diff = Some(diff_summary(&data.bytes, &bytes));
                Ok(out)
            }
            "metadata" => {
                let d = sandbox.stat(&path).await?;
                let kind =
                    serde_json::to_value(d.kind).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
                Ok(ToolOutcome::ok(
                    "file",
                    format!(
                        "path: {}\ntype: {kind}\nsize: {}\nmode: {:o}\nuid: {}\ngid: {}\nmtime: {}",
                        d.path,
                        d.size,
                        d.mode & 0o7777,
                        d.uid,
                        d.gid,
                        d.mtime
                    ),
                ))
            }
            other => Ok(ToolOutcome::err("file", format!("unknown file action `{other}`"))),
        }
    }

    async fn search(&mut self, args: &Map<String, Value>) -> Result<ToolOutcome, SandboxError> {
        let sandbox = self.shell.sandbox().clone();
        let cwd = self.shell.cwd().to_string();
        let path = str_arg(args, "path").unwrap_or(".").to_string();
        let pattern = str_arg(args, "pattern").unwrap_or_default().to_string();
        let mut argv: Vec<String> = Vec::new();
        let action = str_arg(args, "action").unwrap_or("grep");
        match action {
            "grep" => {
                argv.extend(["grep", "-rnIE", "--color=never"].map(String::from));
                if bool_arg(args, "ignore_case") {
                    argv.push("-i".into());
                }
                if let Some(inc) = str_arg(args, "include") {
                    argv.push(format!("--include={inc}"));
                }
                argv.extend(["-e".into(), pattern, "--".into(), path]);
            }
            "glob" => {
                // The pattern is expanded by bash's globbing only (it is an argument,
                // never parsed as code).
                let script = "cd -- \"$1\" || exit 2; IFS=; for f in $2; do [ -e \"$f\" ] && printf '%s\\n' \"$f\"; done; exit 0";
                argv.extend(["bash", "-O", "globstar", "-O", "nullglob", "-c", script, "glob"].map(String::from));
                argv.extend([path, pattern]);
            }
            "ls" => argv.extend(["ls", "-la", "--color=never", "--"].map(String::from).into_iter().chain([path])),
            other => return Ok(ToolOutcome::err("search", format!("unknown search action `{other}`"))),
        }
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = sandbox.exec(&refs, Some(&cwd), Duration::from_secs(60), 4 << 20).await?;
        let mut collector = OutputCollector::new(self.max_output);
        collector.push(&out.stdout);
        let text = collector.render();
        let stderr = sanitize(&out.stderr);
        Ok(match (action, out.exit_code) {
            ("grep", Some(1)) => ToolOutcome::ok("search", "no matches"),
            ("glob", Some(0)) if text.trim().is_empty() => ToolOutcome::ok("search", "no files match"),
            (_, Some(0)) => ToolOutcome::ok("search", text),
            (_, None) => ToolOutcome::err("search", "the search took more than 60 s and was stopped"),
            (_, Some(_)) => ToolOutcome::err("search", format!("{}{}", text, stderr.trim())),
        })
    }

    fn todo(&mut self, args: &Map<String, Value>) -> ToolOutcome {
        let res = match str_arg(args, "action").unwrap_or("view") {
            "add" => Ok(self.todos.add(str_arg(args, "text").unwrap_or_default())),
            "complete" => self.todos.complete(int_arg(args, "id").unwrap_or(-1)),
            "delete" => self.todos.delete(int_arg(args, "id").unwrap_or(-1)),
            "view" => Ok(self.todos.render()),
            other => Err(format!("unknown todo action `{other}`")),
        };
        match res {
            Ok(text) => ToolOutcome::ok("todo", text),
            Err(e) => ToolOutcome::err("todo", e),
        }
    }

    fn scratchpad(&mut self, args: &Map<String, Value>) -> ToolOutcome {
        let text = str_arg(args, "text").unwrap_or_default();
        match str_arg(args, "action").unwrap_or("read") {
            "write" => {
                self.scratchpad = text.to_string();
                ToolOutcome::ok("scratchpad", "notes replaced")
            }
            "append" => {
                if !self.scratchpad.is_empty() && !self.scratchpad.ends_with('\n') {
                    self.scratchpad.push('\n');
                }
                self.scratchpad.push_str(text);
                ToolOutcome::ok("scratchpad", "note appended")
            }
            "read" => ToolOutcome::ok(
                "scratchpad",
                if self.scratchpad.is_empty() { "(no notes yet)".to_string() } else { self.scratchpad.clone() },
            ),
            other => ToolOutcome::err("scratchpad", format!("unknown scratchpad action `{other}`")),
        }
    }
}

/// Replaces `old` in `bytes`: exactly one occurrence unless `all`.
fn apply_edit(bytes: &[u8], old: &[u8], new: &[u8], all: bool) -> Result<(Vec<u8>, usize), String> {
    if old.is_empty() {
        return Err("old_string is empty".into());
    }
    let hits: Vec<usize> = memchr::memmem::find_iter(bytes, old).collect();
    // find_iter may report overlapping hits; keep non-overlapping ones.
    let mut starts = Vec::new();
    let mut next_free = 0;
    for h in hits {
        if h >= next_free {
            starts.push(h);
            next_free = h + old.len();
        }
    }
    match starts.len() {
        0 => Err("old_string was not found (it must match exactly, including whitespace and indentation)".into()),
        n if n > 1 && !all => Err(format!(
            "old_string occurs {n} times; include more surrounding text to make it unique, or set replace_all: true"
        )),
        n => {
            let mut out = Vec::with_capacity(bytes.len() + n * new.len());
            let mut last = 0;
            for s in &starts {
                out.extend_from_slice(&bytes[last..*s]);
                out.extend_from_slice(new);
                last = s + old.len();
            }
            out.extend_from_slice(&bytes[last..]);
            Ok((out, n))
        }
    }
}

/// A short line diff for front ends (changed lines only, capped).
fn diff_summary(before: &[u8], after: &[u8]) -> String {
    let a = String::from_utf8_lossy(before);
    let b = String::from_utf8_lossy(after);
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..].iter().rev().zip(b[prefix..].iter().rev()).take_while(|(x, y)| x == y).count();
    let mut out = format!("@@ line {} @@\n", prefix + 1);
    for l in a[prefix..a.len() - suffix].iter().take(200) {
        out.push_str(&format!("-{l}\n"));
    }
    for l in b[prefix..b.len() - suffix].iter().take(200) {
        out.push_str(&format!("+{l}\n"));
    }
    out
}

fn render_read(data: &FileData, offset: Option<i64>, limit: Option<i64>) -> ToolOutcome {
    match data.kind {
        FileKind::Directory => {
            return ToolOutcome::err("file", format!("{} is a directory; use search with action ls", data.path))
        }
        FileKind::Other => return ToolOutcome::err("file", format!("{} is not a regular file", data.path)),
        _ => {}
    }
    if data.bytes.iter().take(8192).any(|&b| b == 0) {
        return ToolOutcome::ok(
            "file",
            format!("{} is a binary file of {} bytes; inspect it with bash (xxd, od, file)", data.path, data.size),
        );
    }
    let text = String::from_utf8_lossy(&data.bytes);
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    let start = offset.unwrap_or(1).max(1) as usize;
    let limit = limit.unwrap_or(2000).max(1) as usize;
    if total == 0 {
        return ToolOutcome::ok("file", format!("{} is empty", data.path));
    }
    if start > total {
        return ToolOutcome::err("file", format!("offset {start} is past the end of {} ({total} lines)", data.path));
    }
    let end = (start - 1 + limit).min(total);
    let mut out = String::new();
    let mut budget = 200_000usize;
    for (i, line) in lines[start - 1..end].iter().enumerate() {
        let shown: String = if line.chars().count() > 2000 {
            format!("{}… [line cut at 2000 characters]", line.chars().take(2000).collect::<String>())
        } else {
            line.to_string()
        };
        let row = format!("{:>6}\t{}\n", start + i, sanitize(shown.as_bytes()));
        if row.len() > budget {
            out.push_str(&format!("[output stopped at line {}: too much text; read on with offset]\n", start + i));
            break;
        }
        budget -= row.len();
        out.push_str(&row);
    }
    if start > 1 || end < total {
        out.push_str(&format!("[lines {start}-{end} of {total}]"));
    }
    ToolOutcome::ok("file", out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_needs_a_unique_match_unless_replace_all() {
        let (out, n) = apply_edit(b"a b a", b"b", b"c", false).unwrap();
        assert_eq!((out.as_slice(), n), (&b"a c a"[..], 1));
        assert!(apply_edit(b"a b a", b"a", b"c", false).unwrap_err().contains("2 times"));
        let (out, n) = apply_edit(b"a b a", b"a", b"xy", true).unwrap();
        assert_eq!((out.as_slice(), n), (&b"xy b xy"[..], 2));
        assert!(apply_edit(b"abc", b"zz", b"", false).unwrap_err().contains("not found"));
        let (out, n) = apply_edit(b"aaaa", b"aa", b"b", true).unwrap();
        assert_eq!((out.as_slice(), n), (&b"bb"[..], 2));
        let (out, _) = apply_edit(b"q\x00\xff'\"\t", b"\x00\xff", b"\n", false).unwrap();
        assert_eq!(out, b"q\n'\"\t");
    }

    #[test]
    fn read_renders_line_numbers_and_ranges() {
        let data = FileData {
            path: "/f".into(),
            kind: FileKind::File,
            bytes: b"one\ntwo\nthree\n".to_vec(),
            size: 14,
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime: 0,
        };
        let out = render_read(&data, Some(2), Some(1));
        assert!(out.observation.contains("     2\ttwo\n"), "{}", out.observation);
        assert!(out.observation.contains("[lines 2-2 of 3]"));
        let out = render_read(&data, None, None);
        assert!(out.observation.contains("     1\tone\n     2\ttwo\n     3\tthree"), "{}", out.observation);
    }

    #[test]
    fn diff_shows_changed_lines() {
        let d = diff_summary(b"a\nb\nc\n", b"a\nB\nc\n");
        assert_eq!(d, "@@ line 2 @@\n-b\n+B\n");
    }
}
