use tessera::plans::Stored;
use tessera::runtime::Runtime;
use tessera::tensor;

// A function called on the runtime runs on its threads after the statement returns: a
// closure held in a local variable is refused, at its call.
#[allow(dead_code)]
fn shift(rt: &Runtime, x: &Stored<f64>, by: f64) {
    let add = |v: f64| v + by;
    let _ = tensor!(rt => y(i) = add(x(i)));
}

fn main() {}
