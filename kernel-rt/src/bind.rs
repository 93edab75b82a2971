//! Run-time binding of tensors to a compiled statement: the checks a kernel's caller makes
//! before calling it.
//!
//! A kernel assumes that its inputs have the formats it was compiled for and dimensions that
//! agree (one dimension per index variable). The `tensor!` macro only learns dimensions when
//! the program runs, and the executables `tessera compile` builds only when they read their
//! input files; both call [`Signature::bind`] first, which checks exactly that and computes
//! the output's dimensions. Errors name the tensor, the mode and both dimensions.
//!
//! This file depends only on `std` and `tessera_formats`: `tessera compile` copies it
//! verbatim into the crates it generates, so the executables need no compiler at run time.

use std::fmt;
use tessera_formats::Format;

/// One tensor of a statement: its name, the format the kernel expects (format text as
/// `Format::parse` reads it) and, for each of its uses, the index variable of each mode (a
/// tensor may be used twice with different variables, as in `A(i,k) * A(k,j)`).
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    pub name: &'a str,
    pub format: &'a str,
    pub uses: &'a [&'a [&'a str]],
}

impl Operand<'_> {
    /// The number of modes (every use has the same number; the checker ensures it).
    pub fn rank(&self) -> usize {
        self.uses.first().map_or(0, |u| u.len())
    }
}

/// What a kernel needs of its arguments.
#[derive(Clone, Copy, Debug)]
pub struct Signature<'a> {
    pub output: Operand<'a>,
    /// In the order the kernel takes its inputs.
    pub inputs: &'a [Operand<'a>],
}

/// Why tensors cannot be bound to a statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindError {
    /// The caller passed the wrong number of inputs (a bug in generated code).
    Arity { expected: usize, found: usize },
    /// A tensor has another number of modes than the statement uses.
    Rank {
        tensor: String,
        expected: usize,
        found: usize,
    },
    /// A tensor is stored in another format than the kernel was compiled for.
    Format {
        tensor: String,
        expected: String,
        found: String,
    },
    /// Two uses of an index variable have different dimensions.
    Dim {
        var: String,
        tensor: String,
        mode: usize,
        dim: usize,
        first_tensor: String,
        first_mode: usize,
        first_dim: usize,
    },
    /// A run of the output's dense levels would hold more values than an allocation can: the
    /// product of their dimensions overflows (a dense outer product of two long sparse vectors).
    TooLarge { tensor: String, dims: Vec<usize> },
    /// The kernel keeps an array over the whole range of an index variable (a workspace, a
    /// counting sort's counts), and the range is longer than any allocation can hold.
    Extent { var: String, dim: usize },
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindError::Arity { expected, found } => {
                write!(f, "the kernel takes {expected} inputs, {found} were given")
            }
            BindError::Rank {
                tensor,
                expected,
                found,
            } => write!(
                f,
                "`{tensor}` has {found} modes, but the statement uses it with {expected} indices"
            ),
            BindError::Format {
                tensor,
                expected,
                found,
            } => write!(
                f,
                "`{tensor}` is stored as `{found}`, but the kernel was compiled for `{expected}` \
                 (convert it, or compile with that format for `{tensor}`)"
            ),
            BindError::Dim {
                var,
                tensor,
                mode,
                dim,
                first_tensor,
                first_mode,
                first_dim,
            } => {
                write!(
                    f,
                    "dimension mismatch for index `{var}`: mode {mode} of `{tensor}` has \
                     dimension {dim}, but mode {first_mode} of `{first_tensor}` has {first_dim}"
                )
            }
            BindError::TooLarge { tensor, dims } => write!(
                f,
                "the output `{tensor}` of dimensions {dims:?} is too large to allocate in its \
                 dense levels (give `{tensor}` a compressed format, e.g. `{}`, or use smaller \
                 operands)",
                "s".repeat(dims.len())
            ),
            BindError::Extent { var, dim } => write!(
                f,
                "index `{var}` ranges over {dim} coordinates, but the kernel keeps an array \
                 over its whole range, which cannot be allocated past {MAX_DENSE_VALUES} \
                 (use smaller dimensions)"
            ),
        }
    }
}

impl std::error::Error for BindError {}

/// A signature's input formats, parsed on first use and kept: a `tensor!` call site holds
/// one in a `static` beside its signature and passes it to [`Signature::bind_cached`], so
/// that a statement run in a loop does not parse its formats on every run (~700
/// instructions an operand). It must only ever be used with one signature.
pub struct FormatCache(std::sync::OnceLock<Vec<Option<Format>>>);

impl FormatCache {
    pub const fn new() -> FormatCache {
        FormatCache(std::sync::OnceLock::new())
    }
}

impl Default for FormatCache {
    fn default() -> Self {
        FormatCache::new()
    }
}

impl Signature<'_> {
    /// Checks the inputs' formats and dimensions (in kernel order) and returns the
    /// dimensions of the output.
    pub fn bind(&self, inputs: &[(&[usize], &Format)]) -> Result<Vec<usize>, BindError> {
        let wanted: Vec<Option<Format>> = self.parsed_inputs();
        self.bind_parsed(&wanted, inputs)
    }

    /// [`Signature::bind`] with the expected formats parsed once into `cache` (which must
    /// only ever be used with this signature).
    pub fn bind_cached(
        &self,
        cache: &FormatCache,
        inputs: &[(&[usize], &Format)],
    ) -> Result<Vec<usize>, BindError> {
        let wanted = cache.0.get_or_init(|| self.parsed_inputs());
        self.bind_parsed(wanted, inputs)
    }

    /// Each input's expected format, then the output's (`None`: its text does not parse,
    /// and nothing matches it).
    fn parsed_inputs(&self) -> Vec<Option<Format>> {
        (self.inputs.iter().chain([&self.output]))
            .map(|op| Format::parse(op.format, op.rank()).ok())
            .collect()
    }

    fn bind_parsed(
        &self,
        wanted: &[Option<Format>],
        inputs: &[(&[usize], &Format)],
    ) -> Result<Vec<usize>, BindError> {
        if inputs.len() != self.inputs.len() || wanted.len() != self.inputs.len() + 1 {
            return Err(BindError::Arity {
                expected: self.inputs.len(),
                found: inputs.len(),
            });
        }
        // (variable, dimension, tensor, mode) of the first use of each variable.
        let mut seen: Vec<(&str, usize, &str, usize)> = Vec::new();
        for ((op, want), (dims, format)) in self.inputs.iter().zip(wanted).zip(inputs) {
            check_dims(op, dims)?;
            check_format(op, want.as_ref(), format)?;
            for vars in op.uses {
                for (mode, (var, &dim)) in vars.iter().zip(dims.iter()).enumerate() {
                    agree(&mut seen, var, dim, op.name, mode)?;
                }
            }
        }
        // The checker guarantees every output variable indexes an input.
        let out_vars = self.output.uses.first().copied().unwrap_or(&[]);
        let out_dims: Vec<usize> = out_vars
            .iter()
            .map(|v| seen.iter().find(|s| s.0 == *v).map_or(0, |s| s.1))
            .collect();
        check_size(&self.output, wanted[self.inputs.len()].as_ref(), &out_dims)?;
        Ok(out_dims)
    }

    /// For `+=`: checks an existing output against the dimensions [`Signature::bind`]
    /// computed and against the output format.
    pub fn check_output(
        &self,
        dims: &[usize],
        format: &Format,
        expected: &[usize],
    ) -> Result<(), BindError> {
        check_dims(&self.output, dims)?;
        let want = Format::parse(self.output.format, self.output.rank()).ok();
        check_format(&self.output, want.as_ref(), format)?;
        for (mode, (&d, &e)) in dims.iter().zip(expected).enumerate() {
            if d != e {
                return Err(BindError::Dim {
                    var: self.output.uses[0][mode].to_string(),
                    tensor: self.output.name.to_string(),
                    mode,
                    dim: d,
                    first_tensor: String::from("the inputs"),
                    first_mode: mode,
                    first_dim: e,
                });
            }
        }
        Ok(())
    }
}

/// The most values a run of a kernel's dense output levels may hold: an allocation of 8-byte
/// values stays below `isize::MAX` bytes, which `Vec` needs (past it, it panics).
pub const MAX_DENSE_VALUES: usize = isize::MAX as usize / 8;

/// Refuses an output with a run of dense levels holding more than [`MAX_DENSE_VALUES`]
/// values per entry of the level above it (the leading run is allocated whole: all of a dense
/// output; a run below a compressed level once per stored entry), instead of letting the
/// kernel's allocation overflow.
fn check_size(op: &Operand<'_>, format: Option<&Format>, dims: &[usize]) -> Result<(), BindError> {
    let Some(format) = format else {
        return Ok(());
    };
    let mut run = Some(1usize);
    for (&mode, level) in format.mode_order().iter().zip(format.levels()) {
        run = match level.is_sparse() {
            true => Some(1),
            false => run.and_then(|n| n.checked_mul(dims[mode])),
        };
        if run.is_none_or(|n| n > MAX_DENSE_VALUES) {
            return Err(BindError::TooLarge {
                tensor: op.name.to_string(),
                dims: dims.to_vec(),
            });
        }
    }
    Ok(())
}

/// Refuses an index variable whose range a kernel's array over it (`extents`: each variable
/// and its dimension) could not hold, instead of letting the allocation panic.
pub fn check_extents(extents: &[(&str, usize)]) -> Result<(), BindError> {
    match extents.iter().find(|(_, dim)| *dim >= MAX_DENSE_VALUES) {
        Some(&(var, dim)) => Err(BindError::Extent {
            var: var.to_string(),
            dim,
        }),
        None => Ok(()),
    }
}

fn check_dims(op: &Operand<'_>, dims: &[usize]) -> Result<(), BindError> {
    if dims.len() != op.rank() {
        return Err(BindError::Rank {
            tensor: op.name.to_string(),
            expected: op.rank(),
            found: dims.len(),
        });
    }
    Ok(())
}

/// `found` is `want`, `op.format` parsed (`None`: it does not parse, and nothing matches).
fn check_format(op: &Operand<'_>, want: Option<&Format>, found: &Format) -> Result<(), BindError> {
    if want != Some(found) {
        return Err(BindError::Format {
            tensor: op.name.to_string(),
            expected: op.format.to_string(),
            found: found.to_string(),
        });
    }
    Ok(())
}

fn agree<'a>(
    seen: &mut Vec<(&'a str, usize, &'a str, usize)>,
    var: &'a str,
    dim: usize,
    tensor: &'a str,
    mode: usize,
) -> Result<(), BindError> {
    match seen.iter().find(|s| s.0 == var) {
        Some(&(_, first_dim, first_tensor, first_mode)) if first_dim != dim => {
            Err(BindError::Dim {
                var: var.to_string(),
                tensor: tensor.to_string(),
                mode,
                dim,
                first_tensor: first_tensor.to_string(),
                first_mode,
                first_dim,
            })
        }
        Some(_) => Ok(()),
        None => {
            seen.push((var, dim, tensor, mode));
            Ok(())
        }
    }
}
