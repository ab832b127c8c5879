//! JSON Schemas of tool arguments, for backends with native tool calling.

use super::{ArgSpec, ArgType};

pub(super) fn object_schema(args: &[ArgSpec]) -> serde_json::Value {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for arg in args {
        properties.insert(arg.name.clone(), arg_schema(arg));
        if arg.required {
            required.push(serde_json::Value::String(arg.name.clone()));
        }
    }
    serde_json::json!({"type": "object", "properties": properties, "required": required})
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
    let mut schema = if arg.fields.is_empty() || arg.ty == ArgType::List {
        serde_json::json!({"type": json_type(arg.ty)})
    } else {
        object_schema(&arg.fields)
    };
    let obj = schema.as_object_mut().expect("schema is an object");
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
    schema
}
