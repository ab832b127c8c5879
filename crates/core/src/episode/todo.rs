//! The agent's todo list (kept by the core, shown by front ends).

use serde::{Deserialize, Serialize};

/// One todo item.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TodoItem {
    pub id: i64,
    pub text: String,
    pub done: bool,
}

/// An ordered list of todo items with stable ids.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TodoList {
    items: Vec<TodoItem>,
    next_id: i64,
}

impl TodoList {
    /// Adds an item; returns the rendered list.
    pub fn add(&mut self, text: &str) -> String {
        self.next_id += 1;
        self.items.push(TodoItem { id: self.next_id, text: text.trim().to_string(), done: false });
        format!("added #{}\n{}", self.next_id, self.render())
    }

    /// Marks an item done.
    pub fn complete(&mut self, id: i64) -> Result<String, String> {
        let Some(item) = self.items.iter_mut().find(|i| i.id == id) else {
            return Err(self.missing(id));
        };
        item.done = true;
        Ok(format!("completed #{id}\n{}", self.render()))
    }

    /// Removes an item.
    pub fn delete(&mut self, id: i64) -> Result<String, String> {
        let before = self.items.len();
        self.items.retain(|i| i.id != id);
        if self.items.len() == before {
            return Err(self.missing(id));
        }
        Ok(format!("deleted #{id}\n{}", self.render()))
    }

    fn missing(&self, id: i64) -> String {
        let ids: Vec<String> = self.items.iter().map(|i| i.id.to_string()).collect();
        format!("no todo item #{id} (existing: {})", if ids.is_empty() { "none".into() } else { ids.join(", ") })
    }

    /// The items.
    pub fn items(&self) -> &[TodoItem] {
        &self.items
    }

    /// The list as text.
    pub fn render(&self) -> String {
        if self.items.is_empty() {
            return "(the todo list is empty)".into();
        }
        self.items
            .iter()
            .map(|i| format!("[{}] #{} {}", if i.done { "x" } else { " " }, i.id, i.text))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_complete_delete() {
        let mut t = TodoList::default();
        t.add("write tests");
        t.add("run them");
        assert!(t.complete(1).unwrap().contains("[x] #1 write tests"));
        assert!(t.delete(7).unwrap_err().contains("existing: 1, 2"));
        t.delete(2).unwrap();
        assert_eq!(t.render(), "[x] #1 write tests");
    }
}
