//! Repetition inside one reply, found while it streams. A small model can fall into a
//! loop within a single reply (a call written as a JSON block, then "Let's run the script
//! one last time…" and the same block again, until the reply's token limit): the loop
//! detector across turns (`stuck.rs`) only sees it once the reply ends, minutes later.
//!
//! The reply is read as a sequence of units: its words (whitespace-separated, so that
//! copies differing only in indentation or line breaks are the same), a long word split
//! every [`MAX_UNIT_CHARS`] characters so that a loop without whitespace is seen too. A
//! loop is a tail of units that repeats a block of them back to back. For each candidate
//! period the detector keeps how many units in a row, ending at the last one, equal the
//! unit one period earlier; candidates come from the last few earlier occurrences of each
//! unit. Each character is read once and each unit costs a bounded amount of work
//! (amortised), so a reply costs O(n) however it is split into deltas.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// The longest unit: a longer word is split, so that text without whitespace (a line of
/// `=` forever) still forms units that can repeat.
const MAX_UNIT_CHARS: usize = 32;

/// The longest block considered, in units (about 5,000 characters of text). Three copies
/// of a longer block do not fit in a 4,096-token reply anyway.
const MAX_PERIOD: usize = 1024;

/// Earlier occurrences of a unit that propose candidate periods. A frequent unit (`the`,
/// `=`, `}`) may appear more often than this within one block; the block is still found
/// through its rarer units, and once found it is followed unit by unit.
const RECENT: usize = 8;

/// Candidate periods followed at once. Candidates in ordinary text die at the next unit
/// that differs, so the cap only bounds the work on pathological input.
const MAX_CANDIDATES: usize = 64;

/// When a repeated block counts as a loop.
#[derive(Debug, Clone, Copy)]
struct Rule {
    /// Copies in a row needed at the least: the original and two repeats. Two copies are
    /// too common in legitimate text (a value printed twice, a line quoted back).
    min_copies: usize,
    /// Non-whitespace characters all the copies must hold together. Legitimate code does
    /// repeat itself verbatim: a test polls three times with the same 90-character lines,
    /// `tokio::select!` takes 64 identical branches, `}` closes nested blocks, a zero
    /// matrix has identical rows. Only the total tells those from a loop, whose copies
    /// keep coming.
    min_total: usize,
}

impl Rule {
    fn holds(&self, copies: usize, weight: usize) -> bool {
        copies >= self.min_copies && copies * weight >= self.min_total
    }
}

/// While the reply streams. Measured on 21,500 Rust, Python, TOML, JSON and Markdown
/// files (the crates in Cargo's registry, Python's standard library, this repository)
/// streamed as replies: three copies of a 64-character span fired in 31 files of ordinary
/// code (tests that repeat a few lines three times); a total of 768 characters still fired
/// on 64 identical `select!` branches and a benchmark's block written four times; 1,024
/// only on generated data (lookup tables, a string of zeros); 1,536 only on 23 tables of
/// hundreds of identical entries. So a loop is cut once its copies hold 1,536
/// non-whitespace characters: about 500 tokens of a 4,096-token reply (the issue's
/// 140-character call block repeats 12 times, a lone `}` 1,536 times).
const STREAMING: Rule = Rule { min_copies: 3, min_total: 1536 };

/// For a reply the user interrupted: it is incomplete anyway, and the user most likely
/// stopped it because it repeated itself, so a third of the total counts (a line of `}`
/// three times, or a test's three identical polls, does not).
const SETTLED: Rule = Rule { min_copies: 3, min_total: 512 };

/// A loop found in a reply: where to cut it and what repeated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopCut {
    /// The reply is kept up to this byte offset: everything before the second copy.
    pub keep: usize,
    /// Characters of text in one copy of the repeated span.
    pub span_chars: usize,
    /// Copies of the span in a row, the kept one included (a partial last copy is not counted).
    pub copies: usize,
}

impl LoopCut {
    /// One line for notices and the trajectory.
    pub fn describe(&self) -> String {
        format!(
            "the reply repeated the same {}-character span {} times in a row; only the text before the second copy was kept",
            self.span_chars, self.copies
        )
    }
}

/// One unit of the reply: a hash of its text and where it starts.
#[derive(Debug, Clone, Copy)]
struct Unit {
    hash: u64,
    start: usize,
}

/// A period (in units) and how many units in a row, ending at the last one, equal the
/// unit one period before them.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    period: usize,
    run: usize,
}

/// The last [`RECENT`] positions of one unit.
#[derive(Debug, Default)]
struct Recent {
    at: [usize; RECENT],
    len: usize,
    next: usize,
}

impl Recent {
    fn push(&mut self, i: usize) {
        self.at[self.next] = i;
        self.next = (self.next + 1) % RECENT;
        self.len = (self.len + 1).min(RECENT);
    }

    fn positions(&self) -> &[usize] {
        &self.at[..self.len]
    }
}

/// Fed a reply's text deltas in order, says when the reply has started to loop.
#[derive(Debug)]
pub struct StreamLoopDetector {
    text: String,
    /// The word being read: its start and its characters so far.
    pending: Option<(usize, usize)>,
    units: Vec<Unit>,
    /// `weights[k]`: the characters of the first `k` units, so that a block's weight is one
    /// subtraction.
    weights: Vec<usize>,
    recent: HashMap<u64, Recent>,
    candidates: Vec<Candidate>,
    cut: Option<LoopCut>,
}

impl Default for StreamLoopDetector {
    fn default() -> Self {
        Self {
            text: String::new(),
            pending: None,
            units: Vec::new(),
            weights: vec![0],
            recent: HashMap::new(),
            candidates: Vec::new(),
            cut: None,
        }
    }
}

impl StreamLoopDetector {
    /// A detector for a new reply.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the next piece of the reply; returns the cut once the reply loops (and from
    /// then on, whatever follows: the rest is more of the loop).
    pub fn push(&mut self, delta: &str) -> Option<&LoopCut> {
        let from = self.text.len();
        self.text.push_str(delta);
        if self.cut.is_some() {
            return self.cut.as_ref();
        }
        for (k, c) in delta.char_indices() {
            let at = from + k;
            if c.is_whitespace() {
                if let Some((start, chars)) = self.pending.take() {
                    self.unit(start, at, chars);
                }
            } else {
                let (start, chars) = self.pending.map_or((at, 1), |(s, n)| (s, n + 1));
                self.pending = Some((start, chars));
                if chars == MAX_UNIT_CHARS {
                    self.pending = None;
                    self.unit(start, at + c.len_utf8(), chars);
                }
            }
            if self.cut.is_some() {
                break;
            }
        }
        self.cut.as_ref()
    }

    /// The reply ended: its last word counts too.
    pub fn finish(&mut self) -> Option<&LoopCut> {
        if self.cut.is_none() {
            if let Some((start, chars)) = self.pending.take() {
                self.unit(start, self.text.len(), chars);
            }
        }
        self.cut.as_ref()
    }

    /// The cut for a reply the user interrupted: the streaming cut if there was one, else
    /// a shorter loop at the end of the text (see [`SETTLED`]). The last word may be cut
    /// off mid-way and is not read.
    pub fn settled(&self) -> Option<LoopCut> {
        self.cut.clone().or_else(|| self.find(&SETTLED))
    }

    /// The cut, once the reply looped.
    pub fn cut(&self) -> Option<&LoopCut> {
        self.cut.as_ref()
    }

    /// Everything read so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Records a finished unit and looks for a loop ending with it.
    fn unit(&mut self, start: usize, end: usize, chars: usize) {
        let mut hasher = DefaultHasher::new();
        self.text[start..end].hash(&mut hasher);
        let hash = hasher.finish();
        let i = self.units.len();
        self.units.push(Unit { hash, start });
        self.weights.push(self.weights[i] + chars);
        let units = &self.units;
        self.candidates.retain_mut(|c| {
            let same = units[i - c.period].hash == hash;
            if same {
                c.run += 1;
            }
            same
        });
        let recent = self.recent.entry(hash).or_default();
        for &j in recent.positions() {
            let period = i - j;
            if period <= MAX_PERIOD
                && self.candidates.len() < MAX_CANDIDATES
                && !self.candidates.iter().any(|c| c.period == period)
            {
                // The repetition may have begun before this unit proposed it (its earlier
                // units were too frequent to propose it): count it from its start. The
                // scan stops at the last unit that differed one period back, where the
                // previous candidate of this period ended, so the scans of one period
                // never cover a unit twice.
                let mut run = 1;
                while run <= j && self.units[i - run].hash == self.units[j - run].hash {
                    run += 1;
                }
                self.candidates.push(Candidate { period, run });
            }
        }
        recent.push(i);
        self.cut = self.find(&STREAMING);
    }

    /// The loop ending at the last unit under `rule`, if any. Only the shortest period of a
    /// repetition is judged: `}` repeated 200 times is also a 64-unit block repeated three
    /// times, and must be judged as the 1-character block it is.
    fn find(&self, rule: &Rule) -> Option<LoopCut> {
        if !self.candidates.iter().any(|c| c.run >= c.period) {
            return None;
        }
        let last = self.units.len().checked_sub(1)?;
        let mut repeating: Vec<Candidate> = self.candidates.iter().copied().filter(|c| c.run >= c.period).collect();
        repeating.sort_by_key(|c| c.period);
        for (k, c) in repeating.iter().enumerate() {
            let shorter =
                repeating[..k].iter().any(|q| c.period % q.period == 0 && q.run + q.period >= c.run + c.period);
            if shorter {
                continue;
            }
            let copies = (c.run + c.period) / c.period;
            let weight = self.weights[last + 1] - self.weights[last + 1 - c.period];
            if rule.holds(copies, weight) {
                return Some(self.cut_at(c.period, c.run, last));
            }
        }
        None
    }

    /// Where a loop of `period` units whose run ends at unit `last` is cut: the run is
    /// counted from where the repetition starts (see [`Self::unit`]), so the copy before
    /// it is the first, and the cut keeps exactly that one.
    fn cut_at(&self, period: usize, run: usize, last: usize) -> LoopCut {
        let second = last + 1 - run;
        let first = second - period;
        let keep = self.units[second].start;
        let span_chars = self.text[self.units[first].start..keep].chars().count();
        LoopCut { keep, span_chars, copies: (last + 1 - first) / period }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `text` in pieces of `size` characters; returns the cut and how many bytes had
    /// been fed when it came.
    fn feed(text: &str, size: usize) -> (Option<LoopCut>, usize) {
        let mut d = StreamLoopDetector::new();
        let chars: Vec<char> = text.chars().collect();
        let mut fed = 0;
        for piece in chars.chunks(size.max(1)) {
            let piece: String = piece.iter().collect();
            fed += piece.len();
            if let Some(cut) = d.push(&piece) {
                return (Some(cut.clone()), fed);
            }
        }
        (d.finish().cloned(), fed)
    }

    /// The copies of `span` needed for a cut while streaming.
    fn copies_needed(span: &str) -> usize {
        let weight = span.chars().filter(|c| !c.is_whitespace()).count();
        STREAMING.min_total.div_ceil(weight).max(STREAMING.min_copies)
    }

    const INTRO: &str = "I'll change `mean()` so that it returns 0.0 for an empty list.\n";
    const BLOCK: &str =
        "```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"python3 /workspace/stats.py\"}}\n```\n";
    const AGAIN: &str = "Let's run the script one last time to make sure everything works as expected.\n";

    /// The reply from the issue: a call as a JSON block, then the same sentence and block
    /// over and over.
    fn looping_reply(copies: usize) -> String {
        let mut text = format!("{INTRO}{BLOCK}");
        for _ in 0..copies {
            text.push_str(AGAIN);
            text.push_str(BLOCK);
        }
        text
    }

    #[test]
    fn the_looping_tool_call_reply_is_cut_after_its_first_copy() {
        let text = looping_reply(40);
        for size in [1, 3, 7, 64, text.len()] {
            let (cut, fed) = feed(&text, size);
            let cut = cut.unwrap_or_else(|| panic!("no cut with pieces of {size}"));
            assert_eq!(&text[..cut.keep], format!("{INTRO}{BLOCK}{AGAIN}"), "pieces of {size}");
            assert_eq!(cut.span_chars, BLOCK.len() + AGAIN.len());
            // Found as soon as enough copies streamed, not at the reply's end.
            let needed = copies_needed(&format!("{BLOCK}{AGAIN}"));
            let enough = INTRO.len() + needed * (BLOCK.len() + AGAIN.len()) + size;
            assert!(size == text.len() || fed <= enough, "fed {fed} of {} with pieces of {size}", text.len());
            assert!(cut.copies >= needed, "{cut:?}");
        }
    }

    #[test]
    fn a_repeated_single_line_is_cut() {
        let line = "Let me check the output of the script again.\n";
        let text = format!("The tests pass.\n{}", line.repeat(200));
        let (cut, fed) = feed(&text, 5);
        let cut = cut.expect("a cut");
        assert_eq!(&text[..cut.keep], format!("The tests pass.\n{line}"));
        assert!(fed <= "The tests pass.\n".len() + copies_needed(line) * line.len() + 5, "fed {fed}");
        let long = "Now I will run the test suite again to verify that the fix for the empty list works.\n";
        let (cut, fed) = feed(&long.repeat(50), 4);
        assert_eq!(cut.expect("a cut").keep, long.len());
        assert!(fed <= copies_needed(long) * long.len() + 4, "fed {fed}");
        // A very long block loops at its third copy.
        let block: String = (0..30).map(|i| format!("print('checking value number {i} of the list')\n")).collect();
        let (cut, fed) = feed(&format!("Here.\n{}", block.repeat(5)), 9);
        assert_eq!(cut.expect("a cut").keep, "Here.\n".len() + block.len());
        assert!(fed <= "Here.\n".len() + 3 * block.len() + 9, "fed {fed}");
    }

    #[test]
    fn copies_that_differ_only_in_whitespace_are_one_loop() {
        let a = "def check_empty_list():\n    return statistics_mean([]) == 0.0  # the empty case must give zero\n";
        let b = "def check_empty_list():\n\treturn statistics_mean([])   == 0.0 # the empty case must\n  give zero\n\n";
        let text = format!("{a}{b}").repeat(12);
        let (cut, _) = feed(&text, 3);
        assert_eq!(cut.expect("a cut").keep, a.len());
    }

    #[test]
    fn loops_without_line_breaks_or_whitespace_are_cut() {
        let sentence = "I will now run the tests to check the result of the change. ";
        let (cut, _) = feed(&format!("Done. {}", sentence.repeat(60)), 2);
        assert_eq!(cut.expect("a cut").keep, "Done. ".len() + sentence.len());
        let (cut, fed) = feed(&format!("x {}", "=".repeat(5000)), 11);
        assert!(cut.is_some());
        assert!(fed <= 2 + STREAMING.min_total + 32, "fed {fed}");
    }

    #[test]
    fn numbered_lines_do_not_fire() {
        let text: String =
            (1..=200).map(|i| format!("{i}. Checked item number {i} of the list: it is fine.\n")).collect();
        assert_eq!(feed(&text, 3).0, None);
        let text: String = (1..=300).map(|i| format!("line {i}\n")).collect();
        assert_eq!(feed(&text, 1).0, None);
    }

    #[test]
    fn a_markdown_table_does_not_fire() {
        let mut text = "| test | result | time |\n|------|--------|------|\n".to_string();
        for i in 0..150 {
            text.push_str(&format!("| tests/test_stats.py::test_mean_case_{i} | PASSED | 0.01s |\n"));
        }
        for _ in 0..3 {
            text.push_str("|   |   |   |\n");
        }
        assert_eq!(feed(&text, 4).0, None);
    }

    #[test]
    fn a_python_file_with_similar_functions_does_not_fire() {
        let mut text = "```python\nimport math\n\n".to_string();
        for i in 0..80 {
            text.push_str(&format!(
                "def test_mean_{i}(self):\n    values = [1.0, 2.0, 3.0]\n    result = mean(values)\n    self.assertEqual(result, 2.0)\n    self.assertTrue(math.isfinite(result))\n\n"
            ));
        }
        text.push_str("```\n");
        assert_eq!(feed(&text, 5).0, None);
    }

    #[test]
    fn code_that_repeats_a_few_lines_verbatim_does_not_fire() {
        // Shapes found in real code: a test that polls the same way four times, and
        // `select!` with 64 identical branches.
        let poll = "    {\n        let mut w = spawn(b.wait());\n        let wr = assert_ready!(w.poll());\n        assert!(wr.is_leader());\n    }\n";
        let text = format!("#[test]\nfn barrier() {{\n    let b = Barrier::new(1);\n{}}}\n", poll.repeat(4));
        assert_eq!(feed(&text, 3).0, None);
        let mut d = StreamLoopDetector::new();
        d.push(&text);
        assert_eq!(d.settled(), None, "not even for an interrupted reply");
        let branches = "        x = async { 1 } => x,\n".repeat(64);
        assert_eq!(feed(&format!("let num = tokio::select! {{\n{branches}    }};\n"), 4).0, None);
    }

    #[test]
    fn braces_arrays_and_similar_json_objects_do_not_fire() {
        let mut code = String::new();
        for depth in 0..40 {
            code.push_str(&format!("{}if (x > {depth}) {{\n", "  ".repeat(depth)));
        }
        for depth in (0..40).rev() {
            code.push_str(&format!("{}}}\n", "  ".repeat(depth)));
        }
        assert_eq!(feed(&code, 3).0, None);
        let objects: Vec<String> = (0..120)
            .map(|i| format!("  {{\n    \"id\": {i},\n    \"name\": \"item\",\n    \"enabled\": true,\n    \"weight\": 1.0\n  }}"))
            .collect();
        assert_eq!(feed(&format!("[\n{}\n]\n", objects.join(",\n")), 6).0, None);
        let zeros = "[0, 0, 0, 0, 0, 0, 0, 0],\n".repeat(40);
        assert_eq!(feed(&format!("grid = [\n{zeros}]\n"), 2).0, None);
    }

    #[test]
    fn an_interrupted_reply_loses_a_shorter_loop_at_its_end() {
        let line = "Let me check the output again.\n";
        let text = format!("Fixed.\n{}Let me ch", line.repeat(25));
        let mut d = StreamLoopDetector::new();
        assert!(d.push(&text).is_none(), "too short to cut while streaming");
        let cut = d.settled().expect("a settled cut");
        assert_eq!(&text[..cut.keep], format!("Fixed.\n{line}"));
        let mut d = StreamLoopDetector::new();
        d.push("fn main() {\n    if x {\n        if y {\n        }\n    }\n}\n}\n}\n");
        assert_eq!(d.settled(), None);
    }

    #[test]
    fn long_ordinary_text_streams_in_linear_time() {
        // 200,000 characters of varied prose and code with frequent common words, in
        // one-character deltas: quadratic work would take minutes here.
        let mut text = String::new();
        let mut i = 0u64;
        while text.len() < 200_000 {
            i += 1;
            let r = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            text.push_str(&format!("the value of x_{i} is {r} and the = sign {{ }} then {} ;\n", r % 7));
        }
        let started = std::time::Instant::now();
        assert_eq!(feed(&text, 1).0, None);
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
    }
}
