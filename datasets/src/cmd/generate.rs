//! `tessera-data generate`: deterministic synthetic tensors, streamed to disk.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::ValueEnum;
use tessera_datasets::generate::{generate, Kind, Spec};
use tessera_datasets::progress::Bars;
use tessera_formats::Duplicates;

use super::convert::TcsOptions;

const EXAMPLES: &str = "\
Examples:
  tessera-data generate --dims 1000,2000,3000 --nnz 5000000 --seed 7 -o t.tns
  tessera-data generate --dims 100000,100000 --density 0.0001 --kind powerlaw -o g.mtx
  tessera-data generate --dims 10000,10000 --nnz 1000000 --kind uniform --sorted -o s.tns
  tessera-data generate --dims 1000,1000 --nnz 50000 --duplicates -o d.tns   # repeats allowed
  tessera-data generate --dims 300,300 --kind poisson2d -o p.tcs --format csr
  tessera-data generate --dims 50,50,50 --kind poisson3d -o p3.mtx";

/// Generate a synthetic tensor (the same seed always gives the same file).
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Dimensions, comma-separated (for poisson2d/poisson3d: the grid).
    #[arg(long, value_delimiter = ',', required = true)]
    dims: Vec<u64>,
    /// Number of entries, at distinct coordinates (unless --duplicates).
    #[arg(long, conflicts_with = "density")]
    nnz: Option<u64>,
    /// Fraction of cells that are nonzero, in (0, 1] (rounded to a whole number of entries).
    #[arg(long)]
    density: Option<f64>,
    /// Kind of tensor.
    #[arg(long, value_enum, default_value_t = KindArg::Uniform)]
    kind: KindArg,
    /// Seed of the generator.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Uniform only: write entries in sorted order (sampled in order).
    #[arg(long)]
    sorted: bool,
    /// Uniform and powerlaw: draw every entry independently, so coordinates may repeat
    /// (exactly --nnz lines, fewer distinct entries; summed in a .tcs output).
    #[arg(long)]
    duplicates: bool,
    /// Output file: .tns, .mtx (matrices) or .tcs (converted with the options below).
    #[arg(short, long)]
    output: PathBuf,
    #[command(flatten)]
    tcs: TcsOptions,
}

#[derive(Clone, Copy, ValueEnum)]
enum KindArg {
    /// Coordinates uniform over the index space (unsorted; in order above density 1/2).
    Uniform,
    /// Log-uniform coordinates: Zipf-like slice sizes (unsorted).
    Powerlaw,
    /// A band around the diagonal of the first two modes (sorted).
    Banded,
    /// 5-point Laplacian of a 2-D grid (sorted).
    Poisson2d,
    /// 7-point Laplacian of a 3-D grid (sorted).
    Poisson3d,
}

impl Args {
    pub fn run(&self, quiet: bool) -> anyhow::Result<ExitCode> {
        let kind = match self.kind {
            KindArg::Uniform => Kind::Uniform,
            KindArg::Powerlaw => Kind::Powerlaw,
            KindArg::Banded => Kind::Banded,
            KindArg::Poisson2d => Kind::Poisson2d,
            KindArg::Poisson3d => Kind::Poisson3d,
        };
        let spec = Spec {
            dims: self.dims.clone(),
            nnz: self.nnz,
            density: self.density,
            kind,
            seed: self.seed,
            sorted: self.sorted,
            duplicates: self.duplicates,
        };
        let total = spec.entries()?;
        let bars = Bars::new(quiet);
        let bar = bars.items("generate", total);
        let n = generate(
            &spec,
            &self.output,
            &self.tcs.to_options(Duplicates::Sum),
            &bars,
            &|n| bar.set_position(n),
        )
        .map_err(|e| self.tcs.explain(e))?;
        bar.finish_and_clear();
        eprintln!(
            "{}: {n} entries ({} {}, seed {})",
            self.output.display(),
            kind.name(),
            self.dims
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("x"),
            self.seed
        );
        Ok(ExitCode::SUCCESS)
    }
}
