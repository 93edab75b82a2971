use tessera::plans::Stored;
use tessera::runtime::Runtime;
use tessera::tensor;

// The runtime is a name or a parenthesised expression; `self.rt` and `&rt` were parsed as
// the statement ("unexpected character `.`").
struct Solver {
    rt: Runtime,
}

impl Solver {
    #[allow(dead_code)]
    fn scale(&self, x: &Stored<f64>) {
        let _ = tensor!(self.rt => y(i) = x(i) * 2);
        let rt = &self.rt;
        let _ = tensor!(&rt => y(i) = x(i) * 2);
        let _ = tensor!(=> y(i) = x(i) * 2);
        let _ = tensor!((&self.rt) => y(i) = x(i) * 2);
    }
}

fn main() {}
