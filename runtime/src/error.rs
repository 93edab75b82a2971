//! Errors reported by the runtime.

use crate::dtype::DType;

/// Everything that can go wrong when building stores, submitting tasks or reading results.
/// Stores are named by their id (`store#N`), tasks by their registered name.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum RuntimeError {
    #[error("no task is registered under the name `{0}`")]
    UnknownTask(String),
    #[error("a task is already registered under the name `{0}`")]
    DuplicateTask(String),
    #[error("shape {shape:?} has {dims} dimensions; stores have at most {max}")]
    TooManyDims {
        shape: Vec<usize>,
        dims: usize,
        max: usize,
    },
    #[error("shape {shape:?} is too large to allocate")]
    ShapeTooLarge { shape: Vec<usize> },
    #[error("host data for store of shape {shape:?} has {got} elements, expected {expected}")]
    HostDataLength {
        shape: Vec<usize>,
        expected: usize,
        got: usize,
    },
    #[error("store#{store} holds {actual:?} elements, not {requested:?}")]
    DTypeMismatch {
        store: u64,
        requested: DType,
        actual: DType,
    },
    #[error("slice {lo}..{hi} of dimension {dim} is outside store#{store} of shape {shape:?}")]
    BadSlice {
        store: u64,
        dim: usize,
        lo: usize,
        hi: usize,
        shape: Vec<usize>,
    },
    #[error("store#{store} belongs to another runtime")]
    ForeignStore { store: u64 },
    #[error(
        "task `{task}`: scalar argument {index} is a future of another runtime (read it with \
         `Future::get` and pass the value with `scalar`)"
    )]
    ForeignFuture { task: String, index: usize },
    #[error(
        "task `{task}`: constraint {constraint} names store#{store}, which is not an argument"
    )]
    NotAnArgument {
        task: String,
        constraint: &'static str,
        store: u64,
    },
    #[error(
        "task `{task}`: align(store#{a}, store#{b}) needs equal shapes, got {sa:?} and {sb:?}"
    )]
    AlignShapes {
        task: String,
        a: u64,
        b: u64,
        sa: Vec<usize>,
        sb: Vec<usize>,
    },
    #[error(
        "task `{task}`: broadcast dimension {dim} is out of range for store#{store} of rank {rank}"
    )]
    BroadcastDim {
        task: String,
        store: u64,
        dim: usize,
        rank: usize,
    },
    #[error("task `{task}`: image source store#{store} must be 1-d ranges or non-negative integers, not {dtype:?} of rank {rank}")]
    ImageSource {
        task: String,
        store: u64,
        dtype: DType,
        rank: usize,
    },
    #[error("task `{task}`: image(store#{src} -> store#{dst}) reaches position {value}, beyond the destination's extent {extent}")]
    ImageOutOfBounds {
        task: String,
        src: u64,
        dst: u64,
        value: u64,
        extent: usize,
    },
    #[error("task `{task}`: image source store#{store} holds a negative or non-integral value")]
    ImageNegative { task: String, store: u64 },
    #[error("task `{task}`: image constraints form a cycle through store#{store}")]
    ImageCycle { task: String, store: u64 },
    #[error("task `{task}`: tiling of store#{store}: {reason}")]
    Tile {
        task: String,
        store: u64,
        reason: String,
    },
    #[error("task `{task}`: store#{dst} is the destination of more than one image")]
    ImageTwice { task: String, dst: u64 },
    #[error("task `{task}`: arguments {a} and {b} alias store#{store} and one of them is written")]
    AliasedArguments {
        task: String,
        a: usize,
        b: usize,
        store: u64,
    },
    #[error("task `{task}`: argument {arg} is written by several points on overlapping sub-stores of store#{store}")]
    OverlappingWrites {
        task: String,
        arg: usize,
        store: u64,
    },
    #[error("task `{task}`: store#{store} of {dtype:?} cannot be reduced with {op:?}")]
    UnsupportedReduction {
        task: String,
        store: u64,
        dtype: DType,
        op: crate::ReduceOp,
    },
    #[error("task `{task}`: unbound store#{store} can only be written once, by `write_unbound`")]
    UnboundMisuse { task: String, store: u64 },
    #[error("task `{task}`: store#{store} is unbound and has no task that will bind it")]
    NeverBound { task: String, store: u64 },
    #[error("task `{task}`: launch domain {domain:?} is empty, has more than 4 dimensions or more than 2^32 - 1 points")]
    BadLaunchDomain { task: String, domain: Vec<usize> },
    #[error("the shares of a {len}-element store must be disjoint and cover it: {why}")]
    BadShares { len: usize, why: String },
    #[error(
        "task `{task}` is sharded by launch dimensions {dims:?}, but its launch domain is \
         {domain:?}: a sharding key needs a fixed launch domain (`launch_domain`) and names \
         each of its dimensions at most once"
    )]
    BadShardKey {
        task: String,
        dims: Vec<usize>,
        domain: Option<Vec<usize>>,
    },
    #[error("task `{task}` failed at point {point:?}: {message}")]
    TaskFailed {
        task: String,
        point: Vec<usize>,
        message: String,
    },
    #[error("fill value {value:?} does not fit store#{store} of {dtype:?}")]
    FillValue {
        store: u64,
        dtype: DType,
        value: crate::Scalar,
    },
    #[error("rank {rank}: {message}")]
    Remote { rank: usize, message: String },
    #[error("ranks disagree on task `{task}` (the {seq}-th solved): hashes by rank {hashes:x?}; every rank must issue the same stream and the analysis must not depend on timing")]
    RanksDisagree {
        task: String,
        seq: u64,
        hashes: Vec<u64>,
    },
    #[error("rank {rank} is not one of the {ranks} ranks")]
    BadRank { rank: usize, ranks: usize },
    #[error("across ranks: {0}")]
    Transport(String),
    #[error("store#{store} is unbound: its extent is not known until the task writing it runs")]
    Unbound { store: u64 },
    #[error("store#{store}: read-back collided with a task touching {rect}; issue tasks from one thread at a time")]
    ConcurrentAccess { store: u64, rect: String },
    #[error("store#{store}: its {bytes} bytes of elements cannot be allocated")]
    OutOfMemory { store: u64, bytes: u64 },
    #[error("`{call}` was called from inside a task body, and would wait for that task itself: call it from the thread that issues the tasks")]
    InsideTask { call: &'static str },
    #[error("store#{store} of shape {shape:?} is not one value: only a one-element store becomes a scalar future")]
    NotOneValue {
        store: u64,
        shape: Option<Vec<usize>>,
    },
}

pub type Result<T> = std::result::Result<T, RuntimeError>;

impl From<crate::transport::TransportError> for RuntimeError {
    fn from(e: crate::transport::TransportError) -> Self {
        RuntimeError::Transport(e.to_string())
    }
}
