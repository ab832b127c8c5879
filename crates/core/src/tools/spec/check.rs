//! Consistency checks of a loaded spec: names, descriptions, the discriminator,
//! defaults, `required_for`/`applies_to`, nested fields, and that every example is a
//! valid call.

use super::{ArgSpec, ArgType, ToolSpec};
use crate::tools::validate_args;

impl ToolSpec {
    /// Checks the spec's internal consistency; returns (field path, message).
    pub(super) fn check(&self) -> Result<(), (String, String)> {
        let err = |field: &str, message: &str| Err((field.to_string(), message.to_string()));
        if !is_identifier(&self.name) {
            return err("name", "must be lowercase letters, digits and `_`, starting with a letter");
        }
        if self.name == "think" || self.name == "tool_call" || self.name.ends_with("_output") {
            return err("name", "is reserved by the action format");
        }
        if self.description.trim().is_empty() {
            return err("description", "must not be empty");
        }
        let disc_values: Option<&[String]> = match self.discriminator.as_deref() {
            None => None,
            Some(d) => {
                let Some(arg) = self.arg(d) else {
                    return Err(("discriminator".into(), format!("names `{d}`, which is not an argument")));
                };
                if arg.ty != ArgType::String || arg.enum_values.is_empty() || !arg.required {
                    return err("discriminator", "must name a required string argument with an `enum`");
                }
                Some(&arg.enum_values)
            }
        };
        check_args(&self.arguments, "arguments", disc_values)?;
        if let Some(raw) = self.raw_body_arg.as_deref() {
            match self.arg(raw) {
                Some(arg) if arg.ty == ArgType::String => {}
                _ => return Err(("raw_body_arg".into(), format!("names `{raw}`, which is not a string argument"))),
            }
        }
        if self.examples.is_empty() || self.examples.len() > 3 {
            return err("examples", "must hold 1 to 3 examples");
        }
        for (i, example) in self.examples.iter().enumerate() {
            if example.description.trim().is_empty() {
                return Err((format!("examples[{i}].description"), "must not be empty".into()));
            }
            let field = format!("examples[{i}].body");
            let value: serde_yaml::Value =
                serde_yaml::from_str(&example.body).map_err(|e| (field.clone(), format!("is not valid YAML: {e}")))?;
            validate_args(self, value).map_err(|e| (field.clone(), format!("is not a valid call: {e}")))?;
        }
        Ok(())
    }
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn check_args(args: &[ArgSpec], path: &str, disc_values: Option<&[String]>) -> Result<(), (String, String)> {
    for (i, arg) in args.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let fail = |field: &str, message: String| Err((format!("{at}.{field}"), message));
        if !is_identifier(&arg.name) {
            return fail("name", format!("`{}` must be lowercase letters, digits and `_`", arg.name));
        }
        if args[..i].iter().any(|a| a.name == arg.name) {
            return fail("name", format!("`{}` appears twice", arg.name));
        }
        if arg.description.trim().is_empty() {
            return fail("description", "must not be empty".into());
        }
        if !arg.enum_values.is_empty() && arg.ty != ArgType::String {
            return fail("enum", "is allowed only on string arguments".into());
        }
        if arg.required && (arg.default.is_some() || !arg.required_for.is_empty()) {
            return fail("required", "a required argument cannot also have a default or `required_for`".into());
        }
        if let Some(default) = &arg.default {
            if !arg.ty.matches(default) {
                return fail("default", format!("is not a {}", arg.ty));
            }
            if let serde_json::Value::String(s) = default {
                if !arg.enum_values.is_empty() && !arg.enum_values.contains(s) {
                    return fail("default", format!("`{s}` is not one of the `enum` values"));
                }
            }
        }
        for (field, list) in [("required_for", &arg.required_for), ("applies_to", &arg.applies_to)] {
            if list.is_empty() {
                continue;
            }
            let Some(values) = disc_values else {
                return fail(field, "needs a `discriminator` on the tool".into());
            };
            if let Some(bad) = list.iter().find(|v| !values.contains(v)) {
                return fail(field, format!("`{bad}` is not a value of the discriminator's `enum`"));
            }
        }
        if arg.items.is_some() && arg.ty != ArgType::List {
            return fail("items", "is allowed only on list arguments".into());
        }
        if !arg.fields.is_empty() {
            let objecty = arg.ty == ArgType::Object || (arg.ty == ArgType::List && arg.items == Some(ArgType::Object));
            if !objecty {
                return fail("fields", "is allowed only on object arguments and lists of objects".into());
            }
            check_args(&arg.fields, &format!("{at}.fields"), None)?;
        }
    }
    Ok(())
}
