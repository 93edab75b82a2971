//! Errors of the front end with the span they are about, and their rendering.
//!
//! A statement may come from several pieces of text: on the command line the expression,
//! each `-f` flag and the `-s` schedule are separate arguments. The parser gives every piece
//! its own range of byte offsets (its `base`), so one [`Span`] names both the piece and the
//! place inside it; [`SourceMap`] turns it back into "which argument, which column" and
//! renders the diagnostic with `ariadne`. The `tensor!` macro maps the same spans onto the
//! tokens of its input instead (see `tessera-macros`).

use crate::ast::Span;
use ariadne::{Config, IndexType, Label, Report, ReportKind};

/// A user error in a statement: a message, the span it is about and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Diagnostic {
    /// One line saying what is wrong.
    pub message: String,
    /// The primary span, in the offsets of the [`SourceMap`] the text was parsed with.
    pub span: Span,
    /// Text shown under the primary span.
    pub label: String,
    /// How to fix it, when there is something useful to say.
    pub hint: Option<String>,
    /// Other places that explain the error (e.g. the first use of a dimension).
    pub related: Vec<(Span, String)>,
}

impl Diagnostic {
    pub fn new(message: impl Into<String>, span: Span) -> Diagnostic {
        Diagnostic {
            message: message.into(),
            span,
            label: String::new(),
            hint: None,
            related: Vec::new(),
        }
    }

    pub fn label(mut self, label: impl Into<String>) -> Diagnostic {
        self.label = label.into();
        self
    }

    /// Adds a hint; a second one goes on its own line after the first.
    pub fn hint(mut self, hint: impl Into<String>) -> Diagnostic {
        let hint = hint.into();
        self.hint = Some(match self.hint.take() {
            Some(first) => format!("{first}\n{hint}"),
            None => hint,
        });
        self
    }

    pub fn related(mut self, span: Span, label: impl Into<String>) -> Diagnostic {
        self.related.push((span, label.into()));
        self
    }

    /// The message with the hint, on one or two lines (for plain-text contexts such as
    /// `compile_error!`).
    pub fn plain(&self) -> String {
        match &self.hint {
            Some(h) => format!("{}\nhint: {h}", self.message),
            None => self.message.clone(),
        }
    }
}

/// One argument or piece of source text.
#[derive(Clone, Debug)]
struct Piece {
    name: String,
    text: String,
    base: usize,
}

/// The pieces of text a statement was parsed from, each at its own offset `base`.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    pieces: Vec<Piece>,
}

impl SourceMap {
    pub fn new() -> SourceMap {
        SourceMap::default()
    }

    /// Adds a piece named `name` (shown in diagnostics, e.g. `-f A:csr`) and returns the base
    /// offset its spans must be parsed with. Pieces are separated by a gap of one offset so
    /// that an "unexpected end of input" span belongs to the piece it ends.
    pub fn add(&mut self, name: impl Into<String>, text: impl Into<String>) -> usize {
        let base = self.pieces.last().map_or(0, |p| p.base + p.text.len() + 1);
        self.pieces.push(Piece {
            name: name.into(),
            text: text.into(),
            base,
        });
        base
    }

    /// The piece containing `offset` (the last piece whose base is at or before it).
    fn piece(&self, offset: usize) -> Option<&Piece> {
        self.pieces.iter().rev().find(|p| p.base <= offset)
    }

    /// The name of the piece a span lies in and the span relative to that piece.
    pub fn locate(&self, span: &Span) -> Option<(&str, Span)> {
        let p = self.piece(span.start)?;
        let end = span.end.max(span.start).min(p.base + p.text.len() + 1);
        Some((&p.name, (span.start - p.base)..(end - p.base)))
    }

    /// The source text under a span, or "" when it lies outside every piece.
    pub fn text(&self, span: &Span) -> &str {
        match self.piece(span.start) {
            Some(p) => {
                let lo = (span.start - p.base).min(p.text.len());
                let hi = span.end.saturating_sub(p.base).clamp(lo, p.text.len());
                &p.text[lo..hi]
            }
            None => "",
        }
    }

    /// Renders a diagnostic with the source lines it points at.
    pub fn render(&self, d: &Diagnostic, color: bool) -> String {
        let labelled = |span: &Span| -> (String, Span) {
            match self.locate(span) {
                // An empty span (end of input) still needs one column to point at; every
                // piece is rendered with a trailing space for that column.
                Some((name, s)) if s.is_empty() => (name.to_string(), s.start..s.start + 1),
                Some((name, s)) => (name.to_string(), s),
                None => (String::from("<input>"), 0..0),
            }
        };
        let primary = labelled(&d.span);
        let config = Config::default()
            .with_color(color)
            .with_index_type(IndexType::Byte);
        let mut report = Report::build(ReportKind::Error, primary.clone())
            .with_config(config)
            .with_message(&d.message)
            .with_label(primary_label(primary, &d.label));
        for (i, (span, text)) in d.related.iter().enumerate() {
            report = report.with_label(
                Label::new(labelled(span))
                    .with_message(text)
                    .with_order(i as i32 + 1),
            );
        }
        if let Some(h) = &d.hint {
            report = report.with_help(h);
        }
        let sources = ariadne::sources(
            self.pieces
                .iter()
                .map(|p| (p.name.clone(), format!("{} ", p.text))),
        );
        let mut out = Vec::new();
        match report.finish().write(sources, &mut out) {
            Ok(()) => String::from_utf8_lossy(&out).into_owned(),
            // Rendering is best effort; the message itself must never be lost.
            Err(_) => format!("error: {}", d.plain()),
        }
    }
}

/// A lowering error as a diagnostic (same spans, same hint).
pub fn lower_diagnostic(e: &crate::lower::LowerError) -> Diagnostic {
    let message = e.to_string();
    match e.hint() {
        // Some messages end with their hint; say it once, as the hint.
        Some(h) => {
            let short = message.strip_suffix(&format!(": {h}")).unwrap_or(&message);
            Diagnostic::new(short, e.span()).label("here").hint(h)
        }
        None => Diagnostic::new(message, e.span()).label("here"),
    }
}

/// The label under the primary span: with no text, only the underline (an empty message
/// drew an arrow pointing at nothing).
fn primary_label<S: ariadne::Span>(span: S, text: &str) -> Label<S> {
    let label = Label::new(span).with_order(0);
    if text.is_empty() {
        label
    } else {
        label.with_message(text)
    }
}
