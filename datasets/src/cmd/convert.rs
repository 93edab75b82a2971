//! `tessera-data convert IN OUT`: streaming conversion, direction by extension.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::ValueEnum;
use tessera_datasets::progress::Bars;
use tessera_datasets::size::parse_size;
use tessera_formats::{ConvertOptions, Duplicates, ValueType};

const EXAMPLES: &str = "\
Examples:
  tessera-data convert nell-2.tns nell-2.tcs                       # all levels compressed (CSF)
  tessera-data convert A.mtx A.tcs --format csr --index-width 32
  tessera-data convert A.mtx A.tcs --format ds:1,0 --value f32    # CSC
  tessera-data convert big.tns big.tcs --memory 1G --duplicates error
  tessera-data convert A.tcs A.mtx                                 # the way back";

/// Convert between .tns/.mtx and .tcs (the direction follows the extensions).
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Input file (.tns, .mtx or .tcs).
    input: PathBuf,
    /// Output file (.tcs, .tns or .mtx); written to a temporary file and renamed when complete.
    output: PathBuf,
    #[command(flatten)]
    tcs: TcsOptions,
    /// What to do with repeated coordinates.
    #[arg(long, value_enum, default_value_t = DupArg::Sum)]
    duplicates: DupArg,
    /// Sync the output to disk (fsync) before renaming it into place, so that it survives a
    /// crash or power loss; the conversion then runs at the disk's write speed. Off by
    /// default, as for cp: the output can be made again from the input, and a .tcs reader's
    /// checksums reject a file that a crash cut short.
    #[arg(long)]
    sync: bool,
}

/// Options that shape `.tcs` output (shared with `generate`).
#[derive(clap::Args)]
pub struct TcsOptions {
    /// Level format of .tcs output: letters d/s/q with an optional mode order (ds, ds:1,0, sss,
    /// sq for COO) or a name (dense, csr, csc, dcsr, csf, coo). Default: all levels compressed.
    #[arg(long, short)]
    pub format: Option<String>,
    /// Coordinate width in bits.
    #[arg(long, default_value = "32", value_parser = ["32", "64"])]
    pub index_width: String,
    /// Value type.
    #[arg(long, value_enum, default_value_t = ValueArg::F64)]
    pub value: ValueArg,
    /// Memory budget for sorting and buffers (e.g. 64M, 256MiB, 2G).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub memory: usize,
    /// Directory for sorted runs (default: the output's directory).
    #[arg(long)]
    pub temp_dir: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ValueArg {
    F32,
    F64,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum DupArg {
    /// Add the values of repeated coordinates.
    Sum,
    /// Reject input with repeated coordinates.
    Error,
}

impl From<DupArg> for Duplicates {
    fn from(d: DupArg) -> Duplicates {
        match d {
            DupArg::Sum => Duplicates::Sum,
            DupArg::Error => Duplicates::Error,
        }
    }
}

impl TcsOptions {
    /// A conversion's error, with the flag that mends it when a coordinate or dimension does
    /// not fit 32 bits (the converter's own message, shared with the library and generated
    /// programs, can only say "use 64-bit coordinates").
    pub fn explain(&self, e: anyhow::Error) -> anyhow::Error {
        if self.index_width == "32" && e.to_string().contains("64-bit coordinates") {
            return anyhow::anyhow!("{} (`--index-width 64`)", crate::error_chain(&e));
        }
        // A sorted run that cannot be written names the directory; say which flag chose it.
        let chain = crate::error_chain(&e);
        match &self.temp_dir {
            Some(dir) if chain.contains(&dir.display().to_string()) => {
                anyhow::anyhow!("{chain} (the directory `--temp-dir` gives)")
            }
            _ => e,
        }
    }

    /// The conversion's options; `duplicates` says what to do with repeated coordinates.
    pub fn to_options(&self, duplicates: Duplicates) -> ConvertOptions {
        ConvertOptions {
            format: self.format.clone(),
            index_bits: if self.index_width == "64" { 64 } else { 32 },
            value_type: match self.value {
                ValueArg::F32 => ValueType::F32,
                ValueArg::F64 => ValueType::F64,
            },
            memory: self.memory,
            duplicates,
            temp_dir: self.temp_dir.clone(),
            ..ConvertOptions::default()
        }
    }
}

impl Args {
    /// `--format` and `--temp-dir` shape a `.tcs` output (its levels; the sorted runs of
    /// building it): given for a text output they would be ignored, and the user would get a
    /// file other than the one asked for.
    fn refuse_tcs_flags_for_text(&self) -> anyhow::Result<()> {
        let to_tcs = self
            .output
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("tcs"));
        let given = [
            ("--format", self.tcs.format.is_some()),
            ("--temp-dir", self.tcs.temp_dir.is_some()),
        ];
        match given.iter().find(|(_, on)| *on && !to_tcs) {
            Some((flag, _)) => anyhow::bail!(
                "{flag} shapes a .tcs output, but {} is text (.tns or .mtx): \
                 drop {flag}, or write a .tcs file",
                self.output.display()
            ),
            None => Ok(()),
        }
    }

    pub fn run(&self, quiet: bool) -> anyhow::Result<ExitCode> {
        self.refuse_tcs_flags_for_text()?;
        let start = Instant::now();
        let bars = Bars::new(quiet);
        let input_bytes = std::fs::metadata(&self.input).map(|m| m.len()).unwrap_or(0);
        let opts = ConvertOptions {
            sync: self.sync,
            ..self.tcs.to_options(self.duplicates.into())
        };
        let r = tessera_formats::convert(&self.input, &self.output, &opts, &bars)
            .map_err(|e| self.tcs.explain(e.into()))?;
        let secs = start.elapsed().as_secs_f64();
        let dims: Vec<String> = r.dims.iter().map(|d| d.to_string()).collect();
        let to_tcs = self
            .output
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("tcs"));
        let path = if !to_tcs {
            "streamed".to_string()
        } else if r.presorted {
            "presorted, read once".to_string()
        } else if r.runs_spilled == 0 {
            // Every sorted run fitted `--memory`: no temporary file was written.
            format!("sorted in memory: {} runs", r.runs)
        } else {
            format!(
                "external sort: {} runs ({} written to disk), {} extra merge rounds",
                r.runs, r.runs_spilled, r.merge_rounds
            )
        };
        eprintln!(
            "{} -> {}: {} entries read, {} stored, dims {}, {path}; {} bytes in {secs:.2} s ({:.1} MB/s)",
            self.input.display(),
            self.output.display(),
            r.entries_read,
            r.entries_written,
            if dims.is_empty() { "() (scalar)".to_string() } else { dims.join("x") },
            r.output_bytes,
            input_bytes as f64 / secs / 1e6,
        );
        Ok(ExitCode::SUCCESS)
    }
}
