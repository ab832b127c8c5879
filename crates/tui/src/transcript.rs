//! The transcript: cells, their wrapped lines cached per width, and a renderer that
//! wraps and draws only the cells in view, so long transcripts cost what the screen
//! shows.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::Line;

use super::call_filter::CallFilter;
use super::cell::{cell_lines, CellKind, RenderOpts, ToolCell};
use super::wrap::wrap_lines;

struct Entry {
    cell: CellKind,
    /// Wrapped lines for (width, options), with the blank separator line.
    cache: Option<(u16, RenderOpts, Vec<Line<'static>>)>,
}

/// All cells of the conversation.
#[derive(Default)]
pub struct Transcript {
    entries: Vec<Entry>,
    /// Lines scrolled up from the bottom (0 follows new output).
    pub scroll: usize,
    /// The height the transcript was last drawn at (a page for PgUp/PgDn).
    pub viewport: usize,
    pub opts: RenderOpts,
}

impl Transcript {
    /// Appends a cell.
    pub fn push(&mut self, cell: CellKind) {
        self.entries.push(Entry { cell, cache: None });
    }

    /// Removes every cell.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.scroll = 0;
    }

    /// A copy of every cell (a checkpoint of the conversation as shown).
    pub fn snapshot(&self) -> Vec<CellKind> {
        self.entries.iter().map(|e| e.cell.clone()).collect()
    }

    /// Replaces every cell.
    pub fn replace(&mut self, cells: Vec<CellKind>) {
        self.entries = cells.into_iter().map(|cell| Entry { cell, cache: None }).collect();
        self.scroll = 0;
    }

    /// Keeps the first `n` cells.
    pub fn truncate(&mut self, n: usize) {
        self.entries.truncate(n);
        self.scroll = 0;
    }

    /// How many cells there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no cell.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The cells, oldest first.
    pub fn cells(&self) -> impl DoubleEndedIterator<Item = &CellKind> {
        self.entries.iter().map(|e| &e.cell)
    }

    /// Mutable access to the last cell (its cache is dropped).
    pub fn last_mut(&mut self) -> Option<&mut CellKind> {
        self.entries.last_mut().map(|e| {
            e.cache = None;
            &mut e.cell
        })
    }

    /// The newest tool cell with this call id (its cache is dropped).
    pub fn tool_mut(&mut self, call_id: &str) -> Option<&mut ToolCell> {
        self.entries.iter_mut().rev().find_map(|e| match &mut e.cell {
            CellKind::Tool(t) if t.call_id == call_id => {
                e.cache = None;
                Some(t)
            }
            _ => None,
        })
    }

    /// Applies `f` to the newest assistant reply; its cache is dropped when `f` returns
    /// true (it changed the reply).
    pub fn last_reply_mut(&mut self, f: impl FnOnce(&mut CallFilter) -> bool) {
        let found = self.entries.iter_mut().rev().find(|e| matches!(e.cell, CellKind::Assistant { .. }));
        if let Some(e) = found {
            if let CellKind::Assistant { reply, .. } = &mut e.cell {
                if f(reply) {
                    e.cache = None;
                }
            }
        }
    }

    /// Applies `f` to every cell for which it returns true (those caches are dropped).
    pub fn update_all(&mut self, mut f: impl FnMut(&mut CellKind) -> bool) {
        for e in &mut self.entries {
            if f(&mut e.cell) {
                e.cache = None;
            }
        }
    }

    fn wrapped(entry: &mut Entry, width: u16, opts: RenderOpts) -> &[Line<'static>] {
        let fresh = matches!(&entry.cache, Some((w, o, _)) if *w == width && *o == opts);
        if !fresh {
            let mut lines = wrap_lines(&cell_lines(&entry.cell, opts), usize::from(width));
            lines.push(Line::default());
            entry.cache = Some((width, opts, lines));
        }
        match &entry.cache {
            Some((_, _, lines)) => lines,
            None => &[],
        }
    }

    /// Scrolls by a page: the view's height less two lines of context.
    pub fn page(&mut self, up: bool) {
        let page = self.viewport.saturating_sub(2).max(1) as isize;
        self.scroll_by(if up { page } else { -page });
    }

    /// Scrolls by `delta` lines (positive: up, into the past).
    pub fn scroll_by(&mut self, delta: isize) {
        self.scroll = self.scroll.saturating_add_signed(delta);
    }

    /// Draws the transcript bottom-aligned in `area`, `scroll` lines up from the end.
    /// Only the cells that reach into view are wrapped (and cached).
    pub fn render(&mut self, area: Rect, buf: &mut Buffer) {
        if area.height == 0 || area.width == 0 {
            return;
        }
        let height = usize::from(area.height);
        self.viewport = height;
        let opts = self.opts;
        // Walk from the newest cell back until the view (plus the scroll) is filled.
        let need = height + self.scroll;
        let mut taken = 0usize;
        let mut first = self.entries.len();
        while first > 0 && taken < need {
            first -= 1;
            taken += Self::wrapped(&mut self.entries[first], area.width, opts).len();
        }
        // Scrolled past the top: clamp so the first line sits at the top.
        if taken < need && self.scroll > 0 {
            self.scroll = taken.saturating_sub(height);
        }
        let skip_bottom = self.scroll;
        let total = taken;
        let visible_end = total.saturating_sub(skip_bottom);
        let visible_start = visible_end.saturating_sub(height);
        // Short transcripts start at the top of the area.
        let mut y = area.y;
        let mut index = 0usize;
        for entry in &mut self.entries[first..] {
            let lines = Self::wrapped(entry, area.width, opts);
            for line in lines {
                if index >= visible_start && index < visible_end {
                    buf.set_line(area.x, y, line, area.width);
                    y += 1;
                }
                index += 1;
            }
            if index >= visible_end {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn screen(buf: &Buffer) -> Vec<String> {
        (0..buf.area.height)
            .map(|y| {
                (0..buf.area.width).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>().trim_end().to_string()
            })
            .collect()
    }

    #[test]
    fn shows_the_end_and_scrolls_back() {
        let mut t = Transcript::default();
        for i in 0..100 {
            t.push(CellKind::Info { text: format!("line {i}") });
        }
        let area = Rect::new(0, 0, 20, 4);
        let mut buf = Buffer::empty(area);
        t.render(area, &mut buf);
        assert_eq!(screen(&buf), vec!["  line 98", "", "  line 99", ""]);
        // Only the cells in view were wrapped.
        let cached = t.entries.iter().filter(|e| e.cache.is_some()).count();
        assert!(cached <= 3, "{cached} cells wrapped");
        t.scroll_by(10);
        let mut buf = Buffer::empty(area);
        t.render(area, &mut buf);
        assert!(screen(&buf).contains(&"  line 94".to_string()), "{:?}", screen(&buf));
        // Scrolling far past the top clamps to the first line.
        t.scroll_by(10_000);
        let mut buf = Buffer::empty(area);
        t.render(area, &mut buf);
        assert_eq!(screen(&buf)[0], "  line 0");
    }
}
