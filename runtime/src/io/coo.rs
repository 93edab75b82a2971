//! COO (singleton) levels at the seams of distributed loading and storing.
//!
//! The walks and section reads of this module know dense and compressed levels. A tensor
//! with singleton levels (`sq`, `dsqq`) stores its entries in the same order as its unique
//! form ([`Format::unique`]: `ss`, `dsss`), and re-levelling between the two is one linear
//! pass that keeps every stored entry ([`TensorView::relevel`]). So the in-memory entry
//! points re-level at the seams: [`load_blocks`](super::load_blocks) loads the unique form
//! and hands out blocks in the COO format; [`merge_blocks`](super::merge_blocks) merges the
//! blocks' unique forms while the pooled layout keeps the COO format, which
//! [`store_to_root`](super::store_to_root) re-levels the result into.
//!
//! [`store_file`](super::store_file) writes the COO format itself, byte for byte the file one
//! process writes, each rank its own runs: the merge yields the same entries in the same
//! order, and the partial headers and pieces build the levels from the non-unique one down
//! per entry (see `assemble::Shape`): that level's `pos` counts the entries under each
//! parent, and it and the singletons below store one coordinate per entry, at the entry's
//! leaf number. Files with singleton levels given to `split_file` and `merge_dir` (which
//! read pieces of files) are refused with [`file_error`] rather than converted whole in
//! memory.

use super::IoError;
use tessera_formats::{Format, Index, Tensor, TensorView, Value};

/// The unique form of a COO view (`None` when `view` has no singleton level).
pub(crate) fn unique<V: Value, I: Index>(
    view: &TensorView<'_, V, I>,
) -> Result<Option<Tensor<V, I>>, IoError> {
    if view.format().coo_start().is_none() {
        return Ok(None);
    }
    Ok(Some(view.relevel(&view.format().unique())?))
}

/// `t` (in `format`'s unique form) in `format`.
pub(crate) fn relevel<V: Value, I: Index>(
    t: Tensor<V, I>,
    format: &Format,
) -> Result<Tensor<V, I>, IoError> {
    if t.format() == format {
        return Ok(t);
    }
    Ok(t.view().relevel(format)?)
}

/// The error for a `.tcs` file with singleton levels given to a file split or merge.
pub(crate) fn file_error(format: &Format) -> IoError {
    IoError::File(format!(
        "format `{format}` has singleton (COO) levels, which splitting and merging .tcs files do not handle yet; convert the file to `{}` first (tessera-data convert -f {} IN.tcs OUT.tcs)",
        format.unique(),
        format.unique()
    ))
}
