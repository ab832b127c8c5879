//! Build variables as the Dockerfile frontend sees them at each instruction (`ARG`
//! defaults, `ENV`), for the one place the harness expands them itself: the body of an
//! unquoted `COPY <<EOT` heredoc it lowers to a file.

use std::collections::BTreeMap;

use super::dockerfile::{shell_words as words, Instruction};

/// The variables in scope: global `ARG`s (before the first `FROM`) and the stage's.
#[derive(Debug, Default)]
pub struct StageVars {
    global: BTreeMap<String, String>,
    stage: BTreeMap<String, String>,
    in_stage: bool,
}

impl StageVars {
    /// Takes in the effect of `ins` on the variables.
    pub fn apply(&mut self, ins: &Instruction) {
        match ins.keyword.as_str() {
            "FROM" => {
                self.stage.clear();
                self.in_stage = true;
            }
            "ARG" => {
                for word in words(&ins.args) {
                    let (name, value) = match word.split_once('=') {
                        Some((n, v)) => (n.to_string(), Some(self.expand(&unquote(v)))),
                        None => (word.clone(), None),
                    };
                    if self.in_stage {
                        // A global ARG's default reaches a stage only when it is declared there.
                        let value = value.or_else(|| self.global.get(&name).cloned()).unwrap_or_default();
                        self.stage.insert(name, value);
                    } else {
                        self.global.insert(name, value.unwrap_or_default());
                    }
                }
            }
            "ENV" => {
                let all = words(&ins.args);
                if all.first().is_some_and(|w| !w.contains('=')) {
                    // The legacy form: `ENV NAME the rest is the value`.
                    let rest = ins.args.trim_start()[all[0].len()..].trim();
                    let value = self.expand(&unquote(rest));
                    self.stage.insert(all[0].clone(), value);
                    return;
                }
                for word in all {
                    if let Some((n, v)) = word.split_once('=') {
                        let value = self.expand(&unquote(v));
                        self.stage.insert(n.to_string(), value);
                    }
                }
            }
            _ => {}
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        if self.in_stage {
            self.stage.get(name).map(String::as_str)
        } else {
            self.global.get(name).map(String::as_str)
        }
    }

    /// Expands `$NAME`, `${NAME}`, `${NAME:-word}`, `${NAME-word}`, `${NAME:+word}` and
    /// `${NAME+word}`; `\$` is a literal `$`; an unknown variable is empty.
    pub fn expand(&self, text: &str) -> String {
        let chars: Vec<char> = text.chars().collect();
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '\\' && chars.get(i + 1) == Some(&'$') {
                out.push('$');
                i += 2;
                continue;
            }
            if c != '$' {
                out.push(c);
                i += 1;
                continue;
            }
            match chars.get(i + 1) {
                Some('{') => {
                    let Some(close) = chars[i + 2..].iter().position(|c| *c == '}') else {
                        out.extend(&chars[i..]);
                        break;
                    };
                    let inner: String = chars[i + 2..i + 2 + close].iter().collect();
                    out.push_str(&self.braced(&inner));
                    i += close + 3;
                }
                Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
                    let len = chars[i + 1..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == '_').count();
                    let name: String = chars[i + 1..i + 1 + len].iter().collect();
                    out.push_str(self.get(&name).unwrap_or(""));
                    i += len + 1;
                }
                _ => {
                    out.push('$');
                    i += 1;
                }
            }
        }
        out
    }

    fn braced(&self, inner: &str) -> String {
        let name_len = inner.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').count();
        let (name, op) = inner.split_at(name_len);
        let value = self.get(name);
        let set_nonempty = value.is_some_and(|v| !v.is_empty());
        match op {
            "" => value.unwrap_or("").to_string(),
            _ if op.starts_with(":-") => {
                if set_nonempty {
                    value.unwrap_or("").to_string()
                } else {
                    self.expand(&op[2..])
                }
            }
            _ if op.starts_with(":+") => {
                if set_nonempty {
                    self.expand(&op[2..])
                } else {
                    String::new()
                }
            }
            _ if op.starts_with('-') => match value {
                Some(v) => v.to_string(),
                None => self.expand(&op[1..]),
            },
            _ if op.starts_with('+') => {
                if value.is_some() {
                    self.expand(&op[1..])
                } else {
                    String::new()
                }
            }
            _ => value.unwrap_or("").to_string(),
        }
    }
}

/// A value without its surrounding quotes.
fn unquote(v: &str) -> String {
    let v = v.trim();
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return v[1..v.len() - 1].to_string();
        }
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::super::dockerfile::Dockerfile;
    use super::*;

    fn vars_after(src: &str) -> StageVars {
        let df = Dockerfile::parse(src).unwrap();
        let mut v = StageVars::default();
        for ins in df.instructions() {
            v.apply(ins);
        }
        v
    }

    #[test]
    fn args_and_envs_reach_the_stage_as_the_frontend_scopes_them() {
        let v = vars_after(
            "ARG VERSION=1.2\nARG UNUSED=x\nFROM a\nARG VERSION\nARG MODE=fast\nENV APP=/srv/app NAME=\"my app\"\nENV LEGACY value with spaces\n",
        );
        assert_eq!(v.expand("v$VERSION ${MODE} $APP/${NAME}"), "v1.2 fast /srv/app/my app");
        assert_eq!(v.expand("[$UNUSED]"), "[]", "a global ARG not declared in the stage is empty");
        assert_eq!(v.expand("$LEGACY"), "value with spaces");
    }

    #[test]
    fn defaults_alternatives_and_escapes() {
        let v = vars_after("FROM a\nENV SET=yes EMPTY=\n");
        assert_eq!(v.expand("${MISSING:-dflt} ${EMPTY:-e} ${EMPTY-kept} ${SET:+alt} ${MISSING+x}"), "dflt e  alt ");
        assert_eq!(v.expand("\\$SET costs $5 and ${SET}"), "$SET costs $5 and yes");
        assert_eq!(v.expand("unterminated ${SET"), "unterminated ${SET");
    }

    #[test]
    fn a_new_stage_forgets_the_last_ones() {
        let v = vars_after("FROM a\nENV X=1\nFROM b\n");
        assert_eq!(v.expand("[$X]"), "[]");
    }
}
