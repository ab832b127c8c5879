//! Reading a Dockerfile as BuildKit does: parser directives (`# syntax=`, `# escape=`),
//! instructions with their continuation lines, and heredocs (`COPY <<EOT /path`,
//! `RUN <<EOF`), so that `FROM` lines are found only where they are instructions and
//! heredocs can be lowered for builders whose Dockerfile frontend predates them.

/// A parse error, with the 1-based line it concerns.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ParseError {
    pub line: usize,
    pub reason: String,
}

/// One heredoc of an instruction: `<<[-]WORD` and the lines up to `WORD`.
#[derive(Debug, Clone, PartialEq)]
pub struct Heredoc {
    /// The token as written (`<<-"EOF"`, `2<<EOF`).
    pub token: String,
    /// The delimiter without quotes.
    pub word: String,
    /// `<<-`: leading tabs are stripped from the body and the terminator.
    pub strip_tabs: bool,
    /// The body lines and the terminator line, verbatim.
    pub raw: Vec<String>,
}

impl Heredoc {
    /// The content as BuildKit hands it over: body lines (tabs stripped for `<<-`),
    /// each ending with a newline.
    pub fn content(&self) -> String {
        let body = &self.raw[..self.raw.len().saturating_sub(1)];
        let mut out = String::new();
        for line in body {
            out.push_str(if self.strip_tabs { line.trim_start_matches('\t') } else { line });
            out.push('\n');
        }
        out
    }
}

/// A part of a Dockerfile.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A blank line or a comment, kept as written.
    Verbatim(String),
    /// An instruction.
    Instruction(Instruction),
}

/// One instruction with its continuation lines and heredoc bodies.
#[derive(Debug, Clone, PartialEq)]
pub struct Instruction {
    /// The keyword in upper case (`FROM`, `RUN`, …).
    pub keyword: String,
    /// The source lines of the instruction itself (continuations and comments among
    /// them included), verbatim.
    pub lines: Vec<String>,
    /// The instruction as one line: continuations joined, comments dropped, keyword
    /// removed.
    pub args: String,
    /// Heredocs, in the order their tokens appear.
    pub heredocs: Vec<Heredoc>,
    /// 1-based line of the keyword.
    pub line: usize,
}

impl Instruction {
    /// The instruction's source text (heredoc bodies included), each line ending in a
    /// newline.
    pub fn source(&self) -> String {
        let mut out = String::new();
        for l in self.lines.iter().chain(self.heredocs.iter().flat_map(|h| h.raw.iter())) {
            out.push_str(l);
            out.push('\n');
        }
        out
    }

    /// Leading `--flag[=value]` words of the arguments, and the rest.
    pub fn flags_and_rest(&self) -> (Vec<String>, String) {
        split_flags(&self.args)
    }
}

/// Leading `--flag[=value]` words of instruction arguments, and the rest.
fn split_flags(args: &str) -> (Vec<String>, String) {
    let mut flags = Vec::new();
    let mut rest = args.trim_start();
    while rest.starts_with("--") {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        flags.push(rest[..end].to_string());
        rest = rest[end..].trim_start();
    }
    (flags, rest.to_string())
}

/// A parsed Dockerfile.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Dockerfile {
    /// Parser directives (`syntax`, `escape`, `check`), keys lower case, in order,
    /// with their source lines.
    pub directives: Vec<(String, String, String)>,
    pub items: Vec<Item>,
}

/// Instructions that may carry heredocs (as BuildKit reads them).
const HEREDOC_INSTRUCTIONS: &[&str] = &["RUN", "COPY", "ADD"];

impl Dockerfile {
    /// Parses Dockerfile text.
    pub fn parse(text: &str) -> Result<Dockerfile, ParseError> {
        let lines: Vec<&str> = text.lines().collect();
        let mut df = Dockerfile::default();
        let mut i = 0;
        while i < lines.len() {
            match directive(lines[i]) {
                Some((k, v)) if !df.directives.iter().any(|(dk, _, _)| *dk == k) => {
                    df.directives.push((k, v, lines[i].to_string()));
                    i += 1;
                }
                _ => break,
            }
        }
        let escape = df.directive("escape").and_then(|e| e.chars().next()).unwrap_or('\\');
        while i < lines.len() {
            let line = lines[i];
            let trimmed = line.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                df.items.push(Item::Verbatim(line.to_string()));
                i += 1;
                continue;
            }
            let start = i;
            let mut own = vec![line.to_string()];
            let mut joined = continued(line, escape).map(str::to_string).unwrap_or_else(|| line.to_string());
            let mut open = continued(line, escape).is_some();
            i += 1;
            while open && i < lines.len() {
                let next = lines[i];
                own.push(next.to_string());
                i += 1;
                let t = next.trim_start();
                if t.starts_with('#') || t.is_empty() {
                    continue;
                }
                match continued(next, escape) {
                    Some(part) => joined.push_str(part),
                    None => {
                        joined.push_str(next);
                        open = false;
                    }
                }
            }
            let joined = joined.trim_start().to_string();
            let (keyword, args) = match joined.split_once(char::is_whitespace) {
                Some((k, a)) => (k.to_ascii_uppercase(), a.trim_start().to_string()),
                None => (joined.to_ascii_uppercase(), String::new()),
            };
            let mut heredocs = Vec::new();
            if HEREDOC_INSTRUCTIONS.contains(&keyword.as_str()) {
                let (_, rest) = split_flags(&args);
                // The JSON (exec) form has no heredocs.
                if !rest.starts_with('[') {
                    for (token, word, strip_tabs) in heredoc_tokens(&args) {
                        let mut raw = Vec::new();
                        loop {
                            let Some(body_line) = lines.get(i) else {
                                return Err(ParseError {
                                    line: start + 1,
                                    reason: format!("the heredoc {token} is not closed by a line `{word}`"),
                                });
                            };
                            raw.push(body_line.to_string());
                            i += 1;
                            let candidate = if strip_tabs { body_line.trim_start_matches('\t') } else { body_line };
                            if candidate == word {
                                break;
                            }
                        }
                        heredocs.push(Heredoc { token, word, strip_tabs, raw });
                    }
                }
            }
            df.items.push(Item::Instruction(Instruction { keyword, lines: own, args, heredocs, line: start + 1 }));
        }
        Ok(df)
    }

    /// The value of a parser directive.
    pub fn directive(&self, key: &str) -> Option<&str> {
        self.directives.iter().find(|(k, _, _)| k == key).map(|(_, v, _)| v.as_str())
    }

    /// Drops a parser directive.
    pub fn remove_directive(&mut self, key: &str) {
        self.directives.retain(|(k, _, _)| k != key);
    }

    /// The instructions, in order.
    pub fn instructions(&self) -> impl Iterator<Item = &Instruction> {
        self.items.iter().filter_map(|i| match i {
            Item::Instruction(ins) => Some(ins),
            Item::Verbatim(_) => None,
        })
    }

    /// Whether any instruction has a heredoc.
    pub fn has_heredocs(&self) -> bool {
        self.instructions().any(|i| !i.heredocs.is_empty())
    }

    /// The images and stage names `FROM` instructions name, in order.
    pub fn base_images(&self) -> Vec<String> {
        self.instructions()
            .filter(|i| i.keyword == "FROM")
            .filter_map(|i| from_parts(&i.args).map(|p| p.image))
            .collect()
    }

    /// The text again.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (_, _, line) in &self.directives {
            out.push_str(line);
            out.push('\n');
        }
        for item in &self.items {
            match item {
                Item::Verbatim(l) => {
                    out.push_str(l);
                    out.push('\n');
                }
                Item::Instruction(i) => out.push_str(&i.source()),
            }
        }
        out
    }
}

/// `# key=value` at the top of the file, for the keys BuildKit knows.
fn directive(line: &str) -> Option<(String, String)> {
    let body = line.trim().strip_prefix('#')?;
    let (k, v) = body.split_once('=')?;
    let k = k.trim().to_ascii_lowercase();
    ["syntax", "escape", "check"].contains(&k.as_str()).then(|| (k, v.trim().to_string()))
}

/// The line without its trailing escape character when it continues.
fn continued(line: &str, escape: char) -> Option<&str> {
    line.trim_end().strip_suffix(escape)
}

/// Heredoc tokens among the words of `args` (quoted words skipped): token, delimiter,
/// whether tabs are stripped.
fn heredoc_tokens(args: &str) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for word in shell_words(args) {
        let digits = word.chars().take_while(char::is_ascii_digit).count();
        let Some(rest) = word[digits..].strip_prefix("<<") else { continue };
        let (strip, rest) = match rest.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let delim = match rest.chars().next() {
            Some(q @ ('"' | '\'')) if rest.len() >= 2 && rest.ends_with(q) => rest[1..rest.len() - 1].to_string(),
            _ => rest.to_string(),
        };
        if !delim.is_empty() && !delim.contains(['<', '>', '$', '(', ')', '`']) {
            out.push((word.clone(), delim, strip));
        }
    }
    out
}

/// Whitespace-separated words; quotes group (a heredoc token inside a quoted string
/// is part of a word that starts with the quote, so it is not one).
pub(crate) fn shell_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    for c in s.chars() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                }
                cur.push(c);
            }
            None if c.is_whitespace() => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            None => {
                if c == '"' || c == '\'' {
                    quote = Some(c);
                }
                cur.push(c);
            }
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// The parts of a `FROM` instruction's arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct FromParts {
    pub flags: Vec<String>,
    pub image: String,
    /// `AS name`, when given.
    pub stage: Option<String>,
}

/// Splits `FROM` arguments into flags, image and stage name.
pub fn from_parts(args: &str) -> Option<FromParts> {
    let words: Vec<&str> = args.split_whitespace().collect();
    let flags: Vec<String> = words.iter().take_while(|w| w.starts_with("--")).map(|w| w.to_string()).collect();
    let image = words.get(flags.len())?.to_string();
    let stage = match &words[flags.len() + 1..] {
        [as_kw, name] if as_kw.eq_ignore_ascii_case("as") => Some(name.to_string()),
        _ => None,
    };
    Some(FromParts { flags, image, stage })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# syntax=docker/dockerfile:1.4\n# escape=\\\nFROM python:3.13 AS base\n# a comment\nRUN apt-get update && \\\n    # inside\n    apt-get install -y jq\nCOPY <<EOT /app/hello.txt\nFROM not-an-instruction\nhi $HOME\nEOT\nRUN <<EOF\nset -e\necho one > /one\nEOF\nRUN python3 - <<'PY' > /out.txt\nprint('x')\nPY\nCOPY <<-EOT <<B2 /etc/dir/\n\t\tindented\n\tEOT\nsecond\nB2\nRUN echo \"<<NOT\" && cat <<<here\n";

    #[test]
    fn directives_instructions_and_heredocs_are_read_as_buildkit_does() {
        let df = Dockerfile::parse(SAMPLE).unwrap();
        assert_eq!(df.directive("syntax"), Some("docker/dockerfile:1.4"));
        assert_eq!(df.directive("escape"), Some("\\"));
        let ins: Vec<&Instruction> = df.instructions().collect();
        let kw: Vec<&str> = ins.iter().map(|i| i.keyword.as_str()).collect();
        assert_eq!(kw, ["FROM", "RUN", "COPY", "RUN", "RUN", "COPY", "RUN"]);
        assert_eq!(ins[1].args, "apt-get update &&     apt-get install -y jq");
        assert_eq!(ins[2].heredocs.len(), 1);
        assert_eq!(ins[2].heredocs[0].content(), "FROM not-an-instruction\nhi $HOME\n");
        assert_eq!(ins[4].heredocs[0].word, "PY");
        assert_eq!(ins[5].heredocs.len(), 2);
        assert_eq!(ins[5].heredocs[0].content(), "indented\n");
        assert_eq!(ins[5].heredocs[1].content(), "second\n");
        // Quoted strings and here-strings are not heredocs.
        assert!(ins[6].heredocs.is_empty());
        assert_eq!(df.base_images(), ["python:3.13"]);
        assert_eq!(df.render(), SAMPLE);
    }

    #[test]
    fn an_unclosed_heredoc_is_an_error_naming_its_line() {
        let err = Dockerfile::parse("FROM a\nRUN <<EOF\necho\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.reason.contains("<<EOF"), "{err}");
    }

    #[test]
    fn exec_form_and_arithmetic_have_no_heredocs() {
        let df = Dockerfile::parse("FROM a\nRUN [\"sh\", \"-c\", \"cat <<EOF\"]\nRUN echo $((1<<2))\n").unwrap();
        assert!(!df.has_heredocs());
    }

    #[test]
    fn from_parts_split() {
        let p = from_parts("--platform=linux/amd64 img:1 AS b").unwrap();
        assert_eq!(p.flags, ["--platform=linux/amd64"]);
        assert_eq!(p.image, "img:1");
        assert_eq!(p.stage.as_deref(), Some("b"));
        assert!(from_parts("").is_none());
    }
}
