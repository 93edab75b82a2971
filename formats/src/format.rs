//! Level formats: a mode order plus one level type per level, in TACO's string convention.
//!
//! A format string is either a name (`dense`, `csr`, `csc`, `dcsr`, `csf`, `coo`) or one letter
//! per level (`d` dense, `s` compressed, `q` singleton) optionally followed by `:` and the mode
//! order, e.g. `ds:1,0` (CSC). `mode_order[k]` is the tensor mode stored at level `k`.
//!
//! Singleton levels follow TACO's COO convention: `sq` is COO for a matrix, `sqq` for a
//! 3-tensor. A `q` level stores one coordinate per position of the level above it (no `pos`),
//! and the compressed level that starts the run of singletons is *non-unique*: it stores its
//! coordinate once per entry below it. So a `q` may only follow an `s` or another `q`, and
//! every level after the first `q` is a `q` (`dsq`, `ssq`, `sqq` are legal; `q`, `dq`, `sqs`
//! are not).

use std::fmt;

/// How one level of a tensor stores its coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LevelType {
    /// Every coordinate of the level's range is stored implicitly (`d`).
    Dense,
    /// Only coordinates that have children are stored, in `pos`/`crd` arrays (`s`).
    /// Non-unique (one coordinate per entry below it) when a singleton level follows it.
    Compressed,
    /// One coordinate per position of the parent level, in a `crd` array (`q`): the
    /// position of the child equals the position of its parent (TACO's singleton level).
    Singleton,
}

impl LevelType {
    /// The letter used in format strings: `d`, `s` or `q`.
    pub fn letter(self) -> char {
        match self {
            LevelType::Dense => 'd',
            LevelType::Compressed => 's',
            LevelType::Singleton => 'q',
        }
    }

    /// True for levels that store coordinates (`s`, `q`): iterated, never located in O(1).
    pub fn is_sparse(self) -> bool {
        self != LevelType::Dense
    }
}

/// Why a format string or a format/rank combination was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// A named format that only exists for one rank was used with another.
    #[error("format `{name}` is for rank-{expected} tensors, but the tensor has rank {rank}")]
    RankMismatch {
        name: String,
        expected: usize,
        rank: usize,
    },
    /// The number of level letters differs from the tensor rank.
    #[error("format `{text}` has {levels} level letters, but the tensor has rank {rank}")]
    LevelCount {
        text: String,
        levels: usize,
        rank: usize,
    },
    /// A character other than `d`, `s` or `q` in the level part.
    #[error("format `{text}`: unexpected character `{ch}` at column {column}; expected `d` (dense), `s` (compressed) or `q` (singleton), or a name: dense, csr, csc, dcsr, csf, coo")]
    BadLetter {
        text: String,
        ch: char,
        column: usize,
    },
    /// The mode order is not a list of integers.
    #[error(
        "format `{text}`: mode order `{order}` is not a comma-separated list of modes like `1,0`"
    )]
    BadModeOrder { text: String, order: String },
    /// The mode order is not a permutation of `0..rank`.
    #[error("format `{text}`: mode order {order:?} is not a permutation of 0..{rank}")]
    NotPermutation {
        text: String,
        order: Vec<usize>,
        rank: usize,
    },
    /// A singleton level `q` where it cannot be: first, after a dense level, or followed by a
    /// level that is not a singleton. `fix` is the level letters to write instead.
    #[error("format `{text}`: {problem} at column {column}; a singleton level `q` stores one coordinate per entry of the compressed level `s` before it, and only `q` levels may follow it (COO is `sq` for a matrix, `sqq` for a 3-tensor): write `{fix}`")]
    Singleton {
        text: String,
        problem: &'static str,
        column: usize,
        fix: String,
    },
    /// An empty format string.
    #[error("empty format string; expected e.g. `ds`, `ds:1,0`, `csr` or `dense`")]
    Empty,
}

/// The storage format of a tensor: per level a [`LevelType`], and the mode stored at each level.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Format {
    levels: Vec<LevelType>,
    mode_order: Vec<usize>,
}

impl Format {
    /// Builds a format from level types and a mode order, checking that the mode order is a
    /// permutation of `0..levels.len()`.
    pub fn new(levels: Vec<LevelType>, mode_order: Vec<usize>) -> Result<Format, FormatError> {
        let text = || display_parts(&levels, &mode_order);
        if levels.len() != mode_order.len() {
            return Err(FormatError::LevelCount {
                text: text(),
                levels: levels.len(),
                rank: mode_order.len(),
            });
        }
        if !is_permutation(&mode_order) {
            return Err(FormatError::NotPermutation {
                text: text(),
                order: mode_order.clone(),
                rank: levels.len(),
            });
        }
        check_singletons(&text(), &levels)?;
        Ok(Format { levels, mode_order })
    }

    /// COO: a compressed (non-unique) level followed by `rank - 1` singleton levels; for a
    /// vector, a compressed level.
    pub fn coo(rank: usize) -> Format {
        let mut levels = vec![LevelType::Singleton; rank];
        if let Some(first) = levels.first_mut() {
            *first = LevelType::Compressed;
        }
        Format {
            levels,
            mode_order: (0..rank).collect(),
        }
    }

    /// All levels dense, identity mode order (row-major dense array).
    pub fn dense(rank: usize) -> Format {
        Format {
            levels: vec![LevelType::Dense; rank],
            mode_order: (0..rank).collect(),
        }
    }

    /// All levels compressed, identity mode order (CSF; DCSR for matrices).
    pub fn all_compressed(rank: usize) -> Format {
        Format {
            levels: vec![LevelType::Compressed; rank],
            mode_order: (0..rank).collect(),
        }
    }

    /// Parses a format string for a tensor of `rank` modes (see the module docs).
    pub fn parse(s: &str, rank: usize) -> Result<Format, FormatError> {
        let text = s.trim();
        if text.is_empty() {
            // A scalar has no levels, so the empty string is its natural format.
            return if rank == 0 {
                Ok(Format::dense(0))
            } else {
                Err(FormatError::Empty)
            };
        }
        if let Some(f) = Self::parse_name(text, rank)? {
            return Ok(f);
        }
        let (letters, order) = match text.split_once(':') {
            Some((l, o)) => (l, Some(o)),
            None => (text, None),
        };
        let mut levels = Vec::with_capacity(letters.len());
        for (i, ch) in letters.chars().enumerate() {
            levels.push(match ch {
                'd' | 'D' => LevelType::Dense,
                's' | 'S' | 'c' | 'C' => LevelType::Compressed,
                'q' | 'Q' => LevelType::Singleton,
                _ => {
                    return Err(FormatError::BadLetter {
                        text: text.into(),
                        ch,
                        column: i + 1,
                    })
                }
            });
        }
        if levels.len() != rank {
            return Err(FormatError::LevelCount {
                text: text.into(),
                levels: levels.len(),
                rank,
            });
        }
        let mode_order = match order {
            None => (0..rank).collect(),
            Some(o) => parse_order(text, o)?,
        };
        if mode_order.len() != rank || !is_permutation(&mode_order) {
            return Err(FormatError::NotPermutation {
                text: text.into(),
                order: mode_order,
                rank,
            });
        }
        check_singletons(text, &levels)?;
        Ok(Format { levels, mode_order })
    }

    fn parse_name(text: &str, rank: usize) -> Result<Option<Format>, FormatError> {
        use LevelType::{Compressed as S, Dense as D};
        let matrix = |levels: [LevelType; 2], order: [usize; 2]| {
            if rank == 2 {
                Ok(Some(Format {
                    levels: levels.to_vec(),
                    mode_order: order.to_vec(),
                }))
            } else {
                Err(FormatError::RankMismatch {
                    name: text.to_string(),
                    expected: 2,
                    rank,
                })
            }
        };
        match text.to_ascii_lowercase().as_str() {
            "dense" => Ok(Some(Format::dense(rank))),
            "csf" => Ok(Some(Format::all_compressed(rank))),
            "coo" => Ok(Some(Format::coo(rank))),
            "csr" => matrix([D, S], [0, 1]),
            "csc" => matrix([D, S], [1, 0]),
            "dcsr" => matrix([S, S], [0, 1]),
            _ => Ok(None),
        }
    }

    /// Number of levels (= tensor rank).
    pub fn rank(&self) -> usize {
        self.levels.len()
    }

    /// Level types, outermost first.
    pub fn levels(&self) -> &[LevelType] {
        &self.levels
    }

    /// `mode_order()[k]` is the tensor mode stored at level `k`.
    pub fn mode_order(&self) -> &[usize] {
        &self.mode_order
    }

    /// `level_of_mode()[m]` is the level that stores mode `m` (inverse of the mode order).
    pub fn level_of_mode(&self) -> Vec<usize> {
        let mut inv = vec![0; self.rank()];
        for (level, &mode) in self.mode_order.iter().enumerate() {
            inv[mode] = level;
        }
        inv
    }

    /// The non-unique compressed level that starts the format's run of singleton levels
    /// (`Some(0)` for `sq`, `Some(1)` for `dsq`), or `None` without singleton levels.
    pub fn coo_start(&self) -> Option<usize> {
        let first = self
            .levels
            .iter()
            .position(|l| *l == LevelType::Singleton)?;
        Some(first - 1)
    }

    /// True when level `k` may store a coordinate more than once under one parent: the
    /// compressed or singleton level directly above a singleton level.
    pub fn is_non_unique(&self, k: usize) -> bool {
        self.levels.get(k + 1) == Some(&LevelType::Singleton)
    }

    /// This format with every singleton level compressed (`sq` → `ss`, `dsqq` → `dsss`):
    /// the same storage order, each coordinate stored once under its parent.
    pub fn unique(&self) -> Format {
        let levels = self
            .levels
            .iter()
            .map(|l| match l {
                LevelType::Singleton => LevelType::Compressed,
                l => *l,
            })
            .collect();
        Format {
            levels,
            mode_order: self.mode_order.clone(),
        }
    }

    /// True when the mode order is the identity.
    pub fn is_identity_order(&self) -> bool {
        self.mode_order.iter().enumerate().all(|(k, &m)| k == m)
    }
}

impl fmt::Display for Format {
    /// The canonical form, e.g. `ds:1,0`; the mode order is printed only when it is not the
    /// identity. A rank-0 format prints as `dense`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rank() == 0 {
            return f.write_str("dense");
        }
        f.write_str(&display_parts(&self.levels, &self.mode_order))
    }
}

/// A format given as a [`Format`] or as a TACO format string, for a tensor of known rank:
/// what [`Tensor::read`](crate::Tensor::read), [`Tensor::from_entries`](crate::Tensor::from_entries)
/// and [`Tensor::to_format`](crate::Tensor::to_format) take.
pub trait IntoFormat {
    /// The format for a tensor of `rank` modes: text is parsed for that rank; a [`Format`]
    /// is returned as it is (the tensor's constructor checks its rank).
    fn into_format(self, rank: usize) -> Result<Format, FormatError>;
}

impl IntoFormat for Format {
    fn into_format(self, _rank: usize) -> Result<Format, FormatError> {
        Ok(self)
    }
}

impl IntoFormat for &Format {
    fn into_format(self, rank: usize) -> Result<Format, FormatError> {
        self.clone().into_format(rank)
    }
}

impl IntoFormat for &str {
    fn into_format(self, rank: usize) -> Result<Format, FormatError> {
        Format::parse(self, rank)
    }
}

impl IntoFormat for &String {
    fn into_format(self, rank: usize) -> Result<Format, FormatError> {
        Format::parse(self, rank)
    }
}

impl IntoFormat for String {
    fn into_format(self, rank: usize) -> Result<Format, FormatError> {
        Format::parse(&self, rank)
    }
}

fn display_parts(levels: &[LevelType], order: &[usize]) -> String {
    let mut s: String = levels.iter().map(|l| l.letter()).collect();
    if order.iter().enumerate().any(|(k, &m)| k != m) {
        s.push(':');
        let parts: Vec<String> = order.iter().map(|m| m.to_string()).collect();
        s.push_str(&parts.join(","));
    }
    s
}

/// Singleton levels only in a run at the end, right after a compressed level (see the module
/// docs); the error names the offending column and the letters to write instead.
fn check_singletons(text: &str, levels: &[LevelType]) -> Result<(), FormatError> {
    let Some(first) = levels.iter().position(|l| *l == LevelType::Singleton) else {
        return Ok(());
    };
    let order = text
        .split_once(':')
        .map_or(String::new(), |(_, o)| format!(":{o}"));
    let fix = |levels: &[LevelType]| -> String {
        let letters: String = levels.iter().map(|l| l.letter()).collect();
        letters + &order
    };
    let mut fixed = levels.to_vec();
    for l in &mut fixed[first..] {
        *l = LevelType::Singleton;
    }
    if first == 0 {
        fixed[0] = LevelType::Compressed;
        let problem = "singleton level `q` is the first level (it has no parent)";
        return Err(singleton_error(text, problem, 1, fix(&fixed)));
    }
    if levels[first - 1] == LevelType::Dense {
        fixed[first - 1] = LevelType::Compressed;
        let problem = "singleton level `q` follows a dense level `d`";
        return Err(singleton_error(text, problem, first + 1, fix(&fixed)));
    }
    if let Some(k) = (first..levels.len()).find(|k| levels[*k] != LevelType::Singleton) {
        let problem = "a level other than `q` follows a singleton level";
        return Err(singleton_error(text, problem, k + 1, fix(&fixed)));
    }
    Ok(())
}

fn singleton_error(text: &str, problem: &'static str, column: usize, fix: String) -> FormatError {
    FormatError::Singleton {
        text: text.into(),
        problem,
        column,
        fix,
    }
}

fn parse_order(text: &str, order: &str) -> Result<Vec<usize>, FormatError> {
    let bad = || FormatError::BadModeOrder {
        text: text.into(),
        order: order.into(),
    };
    if order.trim().is_empty() {
        return Err(bad());
    }
    order
        .split(',')
        .map(|p| p.trim().parse::<usize>().map_err(|_| bad()))
        .collect()
}

fn is_permutation(order: &[usize]) -> bool {
    let mut seen = vec![false; order.len()];
    for &m in order {
        if m >= order.len() || seen[m] {
            return false;
        }
        seen[m] = true;
    }
    true
}

#[cfg(test)]
#[path = "format_tests.rs"]
mod tests;
