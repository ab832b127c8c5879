//! JSON Schemas of tool arguments, for backends with native tool calling.

use super::{ArgSpec, ArgType, ToolSpec};

pub(super) fn object_schema(args: &[ArgSpec]) -> serde_json::Value {
    serde_json::Value::Object(object_map(args))
}

fn object_map(args: &[ArgSpec]) -> serde_json::Map<String, serde_json::Value> {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for arg in args {
        properties.insert(arg.name.clone(), arg_schema(arg));
        if arg.required {
            required.push(serde_json::Value::String(arg.name.clone()));
        }
    }
    let mut obj = serde_json::Map::new();
    obj.insert("type".into(), "object".into());
    obj.insert("properties".into(), properties.into());
    obj.insert("required".into(), required.into());
    obj
}

/// One schema variant per value of the tool's discriminator (see
/// [`ToolSpec::grammar_schema`]); `None` for a tool without one.
pub(super) fn discriminated_schema(spec: &ToolSpec) -> Option<serde_json::Value> {
    let name = spec.discriminator.as_deref()?;
    let discriminator = spec.arguments.iter().find(|a| a.name == name)?;
    let variants: Vec<serde_json::Value> = discriminator
        .enum_values
        .iter()
        .map(|value| {
            let mut properties = serde_json::Map::new();
            properties.insert(name.to_string(), serde_json::json!({ "const": value }));
            let mut required = vec![serde_json::Value::String(name.to_string())];
            for arg in spec.arguments.iter().filter(|a| a.name != name && a.applies(Some(value))) {
                properties.insert(arg.name.clone(), arg_schema(arg));
                if arg.is_required(Some(value)) {
                    required.push(serde_json::Value::String(arg.name.clone()));
                }
            }
            serde_json::json!({ "type": "object", "properties": properties, "required": required })
        })
        .collect();
    (!variants.is_empty()).then(|| serde_json::json!({ "anyOf": variants }))
}

fn arg_schema(arg: &ArgSpec) -> serde_json::Value {
    let json_type = |ty: ArgType| match ty {
        ArgType::String => "string",
        ArgType::Integer => "integer",
        ArgType::Number => "number",
        ArgType::Boolean => "boolean",
        ArgType::List => "array",
        ArgType::Object => "object",
    };
    let mut description = arg.description.trim().to_string();
    if !arg.required_for.is_empty() {
        description.push_str(&format!(" Required for: {}.", arg.required_for.join(", ")));
    }
    let mut obj = if arg.fields.is_empty() || arg.ty == ArgType::List {
        let mut typed = serde_json::Map::new();
        typed.insert("type".into(), json_type(arg.ty).into());
        typed
    } else {
        object_map(&arg.fields)
    };
    obj.insert("description".into(), description.into());
    if !arg.enum_values.is_empty() {
        obj.insert("enum".into(), arg.enum_values.clone().into());
    }
    if let Some(default) = &arg.default {
        obj.insert("default".into(), default.clone());
    }
    if let Some(item) = arg.items {
        let items = if arg.fields.is_empty() {
            serde_json::json!({"type": json_type(item)})
        } else {
            object_schema(&arg.fields)
        };
        obj.insert("items".into(), items);
    }
    serde_json::Value::Object(obj)
}
