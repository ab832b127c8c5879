//! A model's own Jinja chat template (Hugging Face's `tokenizer.chat_template`, also
//! stored in GGUF files), rendered as `transformers` renders it: with the tools as JSON
//! schemas, assistant tool calls and tool results in the template's own format.
//!
//! llama.cpp's built-in renderer only knows a fixed list of templates by their markers and
//! drops tools, so native tool calling on a GGUF model renders here instead (minijinja,
//! the engine mistral.rs uses for the same job).

use std::fmt::Write as _;
use std::io;

use std::sync::Arc;

use minijinja::value::{Enumerator, Kwargs, Object, ObjectRepr};
use minijinja::{context, Environment, ErrorKind, Value};
use serde::Serialize;

use super::{ChatMessage, LlmError, Role, ToolDefinition};

/// A compiled chat template and the special tokens it may print.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    mentions_tools: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("mentions_tools", &self.mentions_tools).finish()
    }
}

mod qwen3;

pub use qwen3::QWEN3_TEMPLATE;

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// Compiles `source` with the settings `transformers` uses (blocks trimmed, Python
    /// string methods, `tojson` as Python's `json.dumps`, `raise_exception`, `strftime_now`).
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, LlmError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        // Python's negative-step slices reverse a list; minijinja spells that `|reverse`.
        let source = source.replace("[::-1]", "|reverse");
        env.add_template_owned(NAME, source.clone())
            .map_err(|e| LlmError::Other(format!("the model's chat template does not compile: {e}")))?;
        Ok(Self {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            mentions_tools: source.contains("tools"),
        })
    }

    /// The Qwen3-style template ([`QWEN3_TEMPLATE`]), compiled once: what a model
    /// folder without a template of its own is rendered with.
    pub fn qwen3() -> Result<&'static ChatTemplate, LlmError> {
        static COMPILED: std::sync::OnceLock<ChatTemplate> = std::sync::OnceLock::new();
        if let Some(t) = COMPILED.get() {
            return Ok(t);
        }
        let t = ChatTemplate::new(QWEN3_TEMPLATE, "", "<|im_end|>")?;
        Ok(COMPILED.get_or_init(|| t))
    }

    /// The template of a model folder (`tokenizer_config.json`'s `chat_template` with its
    /// `bos_token`/`eos_token`, or `chat_template.jinja`); `None` when it has none.
    pub fn from_model_dir(dir: &std::path::Path) -> Result<Option<Self>, LlmError> {
        let config: serde_json::Value = std::fs::read_to_string(dir.join("tokenizer_config.json"))
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default();
        // A special token is a string or `{"content": "..."}`.
        let token = |key: &str| match config.get(key) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => v.get("content").and_then(|c| c.as_str()).unwrap_or_default().to_string(),
            None => String::new(),
        };
        let source = match config.get("chat_template").and_then(|t| t.as_str()) {
            Some(t) => t.to_string(),
            None => match std::fs::read_to_string(dir.join("chat_template.jinja")) {
                Ok(t) => t,
                Err(_) => return Ok(None),
            },
        };
        Self::new(&source, &token("bos_token"), &token("eos_token")).map(Some)
    }

    /// Whether the template renders tools: it names them, and a tool given to it shows up
    /// in a rendered prompt.
    pub fn supports_tools(&self) -> bool {
        if !self.mentions_tools {
            return false;
        }
        let probe = ToolDefinition {
            name: "probe_tool_name".into(),
            description: "A probe.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {}}),
        };
        let messages = [ChatMessage::new(Role::System, "s"), ChatMessage::new(Role::User, "u")];
        self.render(&messages, std::slice::from_ref(&probe), true).is_ok_and(|text| text.contains("probe_tool_name"))
    }

    /// Renders the conversation; with `add_generation_prompt` it ends with the opening of
    /// the assistant's reply.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDefinition],
        add_generation_prompt: bool,
    ) -> Result<String, LlmError> {
        let template = self.env.get_template(NAME).map_err(render_error)?;
        let messages: Vec<Value> = messages.iter().map(|m| ordered(&message_json(m))).collect();
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| {
                ordered(&serde_json::json!({
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }))
            })
            .collect();
        let ctx = if tools.is_empty() {
            context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos_token,
                eos_token => self.eos_token,
            }
        } else {
            context! {
                messages => messages,
                tools => tools,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos_token,
                eos_token => self.eos_token,
            }
        };
        template.render(ctx).map_err(render_error)
    }
}

fn render_error(e: minijinja::Error) -> LlmError {
    LlmError::Other(format!("the model's chat template failed to render the conversation: {e}"))
}

/// A message as chat templates expect it (`transformers`' dict form): tool calls in
/// OpenAI's shape with the arguments as an object, a tool message's call id.
fn message_json(m: &ChatMessage) -> serde_json::Value {
    let mut msg = serde_json::Map::new();
    msg.insert("role".into(), m.role.as_str().into());
    msg.insert("content".into(), m.content.clone().into());
    if !m.tool_calls.is_empty() {
        let calls = m
            .tool_calls
            .iter()
            .map(|c| {
                serde_json::json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                })
            })
            .collect();
        msg.insert("tool_calls".into(), serde_json::Value::Array(calls));
    }
    if let Some(id) = &m.tool_call_id {
        msg.insert("tool_call_id".into(), id.clone().into());
    }
    serde_json::Value::Object(msg)
}

/// A JSON value for the template with its objects' keys in their own order: minijinja's
/// own maps sort their keys, but `tojson` must print a tool's schema as `transformers`
/// does, in the order it was written (the order the model saw in training).
fn ordered(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Object(map) => Value::from_object(OrderedMap(map.clone())),
        serde_json::Value::Array(items) => Value::from(items.iter().map(ordered).collect::<Vec<_>>()),
        other => Value::from_serialize(other),
    }
}

/// A JSON object seen by the template as a map that enumerates its keys in order.
#[derive(Debug)]
struct OrderedMap(serde_json::Map<String, serde_json::Value>);

impl Object for OrderedMap {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        key.as_str().and_then(|k| self.0.get(k)).map(ordered)
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(self.0.keys().map(|k| Value::from(k.as_str())).collect())
    }
}

fn raise_exception(message: String) -> Result<String, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// `tojson` as Python's `json.dumps(value, ensure_ascii=False)` writes it (what the
/// templates were trained with): `", "` and `": "` separators, keys in their order,
/// nothing HTML-escaped; `indent=N` pretty-prints as Python does.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = Vec::new();
    let result = match indent {
        Some(n) => {
            let pad = vec![b' '; n];
            let mut ser =
                serde_json::Serializer::with_formatter(&mut out, serde_json::ser::PrettyFormatter::with_indent(&pad));
            value.serialize(&mut ser)
        }
        None => {
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
            value.serialize(&mut ser)
        }
    };
    result.map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let text = String::from_utf8(out).map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    Ok(Value::from_safe_string(text))
}

/// serde_json's compact output with Python's default separators.
struct PythonFormatter;

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + io::Write>(&mut self, writer: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + io::Write>(&mut self, writer: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        writer.write_all(b": ")
    }
}

/// `strftime_now(format)` for the date lines some templates print, in UTC; supports the
/// directives templates use (`%Y %m %d %B %b %e %A`, `%%`).
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    strftime(&format, secs)
}

fn strftime(format: &str, unix_secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = ["Thursday", "Friday", "Saturday", "Sunday", "Monday", "Tuesday", "Wednesday"];
    let (y, m, d) = crate::date::civil_date(unix_secs);
    let month = MONTHS[usize::try_from(m - 1).unwrap_or(0).min(11)];
    let weekday = DAYS[((unix_secs / 86_400) % 7) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let _ = match chars.next() {
            Some('Y') => write!(out, "{y:04}"),
            Some('m') => write!(out, "{m:02}"),
            Some('d') => write!(out, "{d:02}"),
            Some('e') => write!(out, "{d:>2}"),
            Some('B') => write!(out, "{month}"),
            Some('b') => write!(out, "{}", &month[..3]),
            Some('A') => write!(out, "{weekday}"),
            Some('%') => write!(out, "%"),
            Some(other) => write!(out, "%{other}"),
            None => write!(out, "%"),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolCall;

    /// Qwen2.5's template (as in the Qwen2.5-Coder GGUF files), the tool parts verbatim.
    pub(crate) const QWEN25: &str = r#"{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;

    fn bash_tool() -> ToolDefinition {
        ToolDefinition {
            name: "bash".into(),
            description: "Run <shell> commands.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}),
        }
    }

    #[test]
    fn renders_qwen_tools_calls_and_results_as_transformers_does() {
        let t = ChatTemplate::new(QWEN25, "", "<|im_end|>").unwrap();
        assert!(t.supports_tools());
        let messages = vec![
            ChatMessage::new(Role::System, "Be brief."),
            ChatMessage::new(Role::User, "List files."),
            ChatMessage {
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "bash".into(),
                    arguments: serde_json::json!({"cmd": "ls -a", "timeout_secs": 5}),
                }],
                ..ChatMessage::new(Role::Assistant, "")
            },
            ChatMessage::tool_result("c1", "a.txt"),
            ChatMessage::tool_result("c1", "exit 0"),
        ];
        let text = t.render(&messages, &[bash_tool()], true).unwrap();
        let expected = concat!(
            "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n",
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n",
            r#"{"type": "function", "function": {"name": "bash", "description": "Run <shell> commands.", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}"#,
            "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n",
            "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n",
            "<|im_start|>user\nList files.<|im_end|>\n",
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls -a\", \"timeout_secs\": 5}}\n</tool_call><|im_end|>\n",
            "<|im_start|>user\n<tool_response>\na.txt\n</tool_response>\n<tool_response>\nexit 0\n</tool_response><|im_end|>\n",
            "<|im_start|>assistant\n",
        );
        assert_eq!(text, expected);
    }

    #[test]
    fn a_template_without_tools_says_so() {
        let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
                      {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        let t = ChatTemplate::new(chatml, "", "").unwrap();
        assert!(!t.supports_tools());
        let text = t.render(&[ChatMessage::new(Role::User, "hi")], &[], true).unwrap();
        assert_eq!(text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    }

    #[test]
    fn python_helpers_work() {
        let src =
            "{{ ' x '.strip() }}|{{ {'a': [1, 'é']} | tojson }}|{{ {'a': 1} | tojson(indent=2) }}|{{ bos_token }}";
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
        assert_eq!(t.render(&[], &[], false).unwrap(), "x|{\"a\": [1, \"é\"]}|{\n  \"a\": 1\n}|<s>");
        let bad = ChatTemplate::new("{{ raise_exception('only user and assistant') }}", "", "").unwrap();
        let err = bad.render(&[], &[], false).unwrap_err().to_string();
        assert!(err.contains("only user and assistant"), "{err}");
        assert!(ChatTemplate::new("{% if %}", "", "").unwrap_err().to_string().contains("does not compile"));
    }

    #[test]
    fn strftime_formats_dates() {
        // 2026-12-03 is a Thursday.
        let secs = 1_796_256_000;
        assert_eq!(strftime("%d %b %Y, %A %B %m %% %q", secs), "03 Dec 2026, Thursday December 12 % %q");
    }
}
