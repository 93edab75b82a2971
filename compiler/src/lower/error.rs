//! Why a checked statement cannot be lowered: each error names the span it is about and,
//! where there is one, the change that would make the statement compile.

use crate::ast::Span;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LowerError {
    /// The operands' mode orders demand contradictory loop orders.
    #[error("no loop order is compatible with every operand's mode order: {hint}")]
    NoLoopOrder {
        span: Span,
        hint: String,
        /// The input whose re-packing into this format makes a loop order exist.
        repack: Option<(String, tessera_formats::Format)>,
    },
    /// `A(i,i)`: one variable indexes two modes of one access.
    #[error("index variable `{var}` indexes two modes of `{tensor}`; diagonal accesses are not supported")]
    RepeatedIndex {
        var: String,
        tensor: String,
        span: Span,
    },
    /// A tensor used with two different numbers of indices.
    #[error("tensor `{tensor}` is used with {first} indices and with {second}")]
    RankMismatch {
        tensor: String,
        first: usize,
        second: usize,
        span: Span,
    },
    /// A format whose rank differs from the tensor's use.
    #[error("tensor `{tensor}` has {rank} indices but its format `{format}` has {levels} levels")]
    FormatRank {
        tensor: String,
        rank: usize,
        format: String,
        levels: usize,
        span: Span,
    },
    /// Lowering broke one of the IR's invariants: a bug in tessera-compiler, not the input's fault.
    #[error("internal error in lowering (please report): {msg}")]
    Internal { msg: String },
    /// `parallelize(v)` on a loop that cannot run over threads.
    #[error("parallelize({var}): {reason}")]
    Parallelize {
        var: String,
        reason: String,
        span: Span,
    },
}

impl LowerError {
    /// The source span the error is about.
    pub fn span(&self) -> Span {
        match self {
            LowerError::NoLoopOrder { span, .. }
            | LowerError::RepeatedIndex { span, .. }
            | LowerError::RankMismatch { span, .. }
            | LowerError::FormatRank { span, .. }
            | LowerError::Parallelize { span, .. } => span.clone(),
            LowerError::Internal { .. } => 0..0,
        }
    }

    /// What the user can change, when lowering knows.
    pub fn hint(&self) -> Option<String> {
        match self {
            LowerError::NoLoopOrder { hint, .. } => Some(hint.clone()),
            LowerError::RepeatedIndex { .. } => {
                Some("use two index variables and multiply by a separate operand".into())
            }
            LowerError::Parallelize { .. } => {
                Some("parallelize the outermost loop over a free variable".into())
            }
            LowerError::RankMismatch { .. }
            | LowerError::FormatRank { .. }
            | LowerError::Internal { .. } => None,
        }
    }
}
