//! One module per subcommand: its arguments and its `run`.

pub mod convert;
pub mod generate;
pub mod info;
