//! Shared by the kernel tests: the catalogue of issue 3, random cases (formats, mode orders,
//! shapes, densities) and their oracle results.
#![allow(dead_code)]

use std::collections::HashMap;

use tessera_compiler::check::{self, Checked};
use tessera_compiler::ir::Kernel;
use tessera_compiler::lower::{self, LowerError};
use tessera_compiler::oracle::{self, DenseArray};
use tessera_compiler::parse;
use tessera_formats::{Format, Index, LevelType, Tensor, Value};

/// The kernels that must work (issue 3), as statements.
pub fn catalogue() -> Vec<&'static str> {
    vec![
        "y(i) = A(i,j) * x(j)",
        "y(j) = A(i,j) * x(i)",
        "y(i) = A(i,j) * x(j) + z(i)",
        "y(i) = A(i,j) * x(j) - 2 * z(i)",
        "C(i,k) = A(i,j) * B(j,k)",
        "C(i,j) = A(i,k) * B(k,j)",
        "A(i,j) = B(i,j) * C(i,k) * D(k,j)",
        "C(i,j) = A(i,j) + B(i,j)",
        "C(i,j) = A(i,j) - B(i,j)",
        "C(i,j) = A(i,j) * B(i,j)",
        "C(i,j) = 3 * A(i,j) + B(i,j) * D(i,j)",
        "a = b(i) * c(i)",
        "a = B(i,j,k) * B(i,j,k)",
        "A(i,j) = B(i,j,k) * c(k)",
        "A(i,j,k) = B(i,j,l) * C(k,l)",
        "A(i,j,k) = B(i,j,l) * C(l,k)",
        "A(i,j) = B(i,k,l) * C(k,j) * D(l,j)",
        "A(i,j) = B(i,k,l,m) * C(k,j) * D(l,j) * E(m,j)",
        "y(i) = exp(x(i)) - abs(x(i)) * 2 + sqrt(abs(z(i)))",
        "y(i) = log(abs(x(i)) + 1) - x(i)",
        "A(i,j,k) = B(i,j,k) + C(i,j,k)",
        "A(i,j,k) = B(i,j,k) * C(i,j,k) - D(i,j,k)",
        "A(i,j,k,l,m) = B(i,j,k,l,m) * C(i,j,k,l,m)",
        "y(i) = B(i,j,k,l,m) * c(m)",
        "A(i,j) = B(i,j,k,l) * C(k,l)",
        "y(i) = -A(i,j) * x(j)",
        "C(i,j) = A(i,j) / 2 + x(i)",
        "C(i,j) = A(i,j) / B(i,j)",
        "a = 2",
        "y(i) = A(i,j) * x(j) * s + t",
        "a = b(i) * c(i) + D(i,j) * D(i,j) - 1",
        "C(i,j) = A(i,k) * B(k,j) + D(i,j)",
        "y(i) = A(j,i) * x(j)",
        "A(i,j,k) = B(i,j,k) * c(k) + D(i,j,k) * e(i)",
    ]
}

/// Element-wise operators and reductions with another operator than `+` (issue 17): each is
/// checked against the oracle, which evaluates densely with the reduction's identity (+∞ for
/// `min`, −∞ for `max`, 0 for `or`) in every entry a sparse operand does not store.
pub fn semiring_catalogue() -> Vec<&'static str> {
    vec![
        "C(i,j) = min[k](A(i,k) + B(k,j))",
        "y(i) = min[j](A(i,j) + x(j))",
        "C(i,j) = max[k](A(i,k) * B(k,j))",
        "y(i) = max[j](A(i,j) * x(j))",
        "y(i) = max[j](A(i,j) + x(j))",
        "y(i) = or[j](and(A(i,j), x(j)))",
        "C(i,j) = or[k](and(A(i,k), B(k,j)))",
        "a = min[i,j](A(i,j))",
        "y(j) = max[i](A(i,j))",
        "y(i) = min[j](min(A(i,j), B(i,j)) + x(j))",
        "y(i) = max[j](max(A(i,j) * x(j), B(i,j)))",
        "C(i,j) = min(A(i,j), B(i,j))",
        "C(i,j) = max(A(i,j), B(i,j)) - min(A(i,j), 0)",
        "C(i,j) = pow(A(i,j), 2) + pow(abs(B(i,j)), 0.5)",
        "y(i) = sin(x(i)) + tanh(A(i,j) * z(j)) - cos(x(i))",
        "C(i,j) = lt(A(i,j), B(i,j)) + 2 * ge(A(i,j), B(i,j)) * A(i,j)",
        "C(i,j) = eq(A(i,j), B(i,j)) * ne(A(i,j), 1) + gt(A(i,j), 0) - le(B(i,j), 0)",
        "C(i,j) = and(A(i,j), B(i,j)) + or(A(i,j), B(i,j))",
        "x(i) = A(i,i)",
        "y(i) = A(i,i) * z(i)",
        "y(i) = A(i,i) * z(i) + B(i,j) * w(j)",
        "a = A(i,i)",
        "y(i) = B(i,i,j) * x(j)",
        "y(i) = min[j](A(i,i) + B(i,j) + x(j))",
        "C(i,j) = A(i,j) * B(j,i)",
        "C(i,j) = B(j,i)",
        "y(i) = min[j](A(i,j) + B(j,i) + x(j))",
    ]
}

/// The value of an absent entry under the statement's reduction.
pub fn fill_of(c: &Checked) -> f64 {
    c.reduce.fill()
}

/// The stored entries of `t` as a dense row-major array, `fill` where nothing is stored.
pub fn densify<V: Value, I: Index>(t: &Tensor<V, I>, fill: f64) -> Vec<f64> {
    let dims = t.dims();
    let mut out = vec![fill; dims.iter().product()];
    for (c, v) in t.entries() {
        let at = c.iter().zip(dims).fold(0, |acc, (c, d)| acc * d + c);
        out[at] = v.to_f64();
    }
    out
}

/// A tiny deterministic generator (the property tests draw only its seed).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Statements with COO operands (`sq`, `sqq`, `dsq`) in every role the merge lattice has:
/// alone, intersected and united with unique levels, a diagonal, an output indexed by fewer
/// variables, COO outputs, and a `parallelize`d loop over a non-unique level.
pub type FormatsOf = &'static [(&'static str, &'static str)];
pub fn coo_catalogue() -> Vec<(&'static str, FormatsOf)> {
    vec![
        ("y(i) = A(i,j) * x(j)", &[("A", "sq")]),
        ("y(j) = A(i,j)", &[("A", "sq")]),
        (
            "C(i,j) = A(i,j) + B(i,j)",
            &[("A", "sq"), ("B", "ds"), ("C", "sq")],
        ),
        (
            "C(i,j) = A(i,j) * B(i,j)",
            &[("A", "sq"), ("B", "sq"), ("C", "ss")],
        ),
        (
            "C(i,j) = A(i,j) + B(i,j)",
            &[("A", "sq:1,0"), ("B", "sq:1,0"), ("C", "ds:1,0")],
        ),
        (
            "C(i,k) = A(i,j) * B(j,k)",
            &[("A", "sq"), ("B", "sq"), ("C", "sq")],
        ),
        ("x(i) = A(i,i)", &[("A", "sq")]),
        ("a = A(i,j,k) * B(i,j,k)", &[("A", "sqq"), ("B", "dsq")]),
        ("y(i) = A(i,j,k) * B(j,k)", &[("A", "sqq"), ("B", "sq")]),
        (
            "y(j) = A(i,j,k) * B(i,k)",
            &[("A", "ssq:0,2,1"), ("B", "sq")],
        ),
        ("C(j,i) = A(i,j)", &[("A", "sq"), ("C", "sq")]),
        ("y(i) = A(i,j) * x(j); parallelize(i)", &[("A", "sq")]),
    ]
}

pub fn format_from_text(text: &str, rank: usize) -> Format {
    Format::parse(text, rank).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// Random level types and a random mode order; for about a third of the matrices and
/// higher-order tensors a COO tail (a compressed level then singletons: `sq`, `dsq`, `sqq`).
pub fn random_format(rank: usize, rng: &mut Rng) -> Format {
    let mut levels: Vec<LevelType> = (0..rank)
        .map(|_| {
            if rng.below(2) == 0 {
                LevelType::Dense
            } else {
                LevelType::Compressed
            }
        })
        .collect();
    let coo = rng.below(3 * rank.max(1));
    if coo + 1 < rank {
        levels[coo] = LevelType::Compressed;
        for l in &mut levels[coo + 1..] {
            *l = LevelType::Singleton;
        }
    }
    let mut order: Vec<usize> = (0..rank).collect();
    for i in (1..rank).rev() {
        order.swap(i, rng.below(i + 1));
    }
    Format::new(levels, order).unwrap()
}

/// One statement with formats, dimensions and dense input data.
pub struct Case {
    pub source: String,
    pub checked: Checked,
    pub dims: HashMap<String, usize>,
    pub data: HashMap<String, DenseArray>,
}

impl Case {
    fn parse(source: &str) -> Checked {
        let stmt = parse::program(source, 0).unwrap_or_else(|e| panic!("{source}: {e:?}"));
        check::check(stmt, &check::Dims::new()).unwrap_or_else(|e| panic!("{source}: {e:?}"))
    }

    /// `expr` with random formats for every tensor, random dimensions and densities.
    pub fn random(expr: &str, rng: &mut Rng) -> Case {
        Case::random_opts(expr, rng, false)
    }

    /// As [`Case::random`]; with `dense_output` the output keeps a dense format (in a random
    /// mode order).
    pub fn random_opts(expr: &str, rng: &mut Rng, dense_output: bool) -> Case {
        let plain = Case::parse(expr);
        let mut source = expr.to_string();
        for t in &plain.tensors {
            if t.rank > 0 {
                let mut f = random_format(t.rank, rng);
                if dense_output && t.is_output {
                    f = Format::new(vec![LevelType::Dense; t.rank], f.mode_order().to_vec())
                        .unwrap();
                }
                source.push_str(&format!("; {}: {}", t.name, f));
            }
        }
        let max = match plain.vars.len() {
            0..=3 => 6,
            4 => 4,
            _ => 3,
        };
        let dims = plain
            .vars
            .iter()
            .map(|v| (v.name.clone(), rng.below(max + 1)))
            .collect();
        Case::build(&source, dims, rng)
    }

    /// `source` (with its `; A: fmt` items given as pairs) and fixed dimensions (4 if not given).
    pub fn fixed(expr: &str, formats: &[(&str, &str)], dims: &[(&str, usize)], seed: u64) -> Case {
        let mut source = expr.to_string();
        for (t, f) in formats {
            source.push_str(&format!("; {t}: {f}"));
        }
        let plain = Case::parse(&source);
        let dims = plain
            .vars
            .iter()
            .map(|v| {
                let d = dims
                    .iter()
                    .find(|(n, _)| *n == v.name)
                    .map_or(4, |(_, d)| *d);
                (v.name.clone(), d)
            })
            .collect();
        Case::build(&source, dims, &mut Rng(seed))
    }

    fn build(source: &str, dims: HashMap<String, usize>, rng: &mut Rng) -> Case {
        let checked = Case::parse(source);
        let fill = fill_of(&checked);
        let mut data = HashMap::new();
        for t in checked.inputs() {
            let shape: Vec<usize> = checked.uses(&t.name)[0]
                .indices
                .iter()
                .map(|i| dims[&i.name])
                .collect();
            let density = [0.0, 0.15, 0.5, 1.0][rng.below(4)];
            let len: usize = shape.iter().product();
            let values = (0..len)
                .map(|_| {
                    if rng.unit() < density {
                        let v = rng.below(6) as f64 - 3.0;
                        if v >= 0.0 {
                            v + 1.0
                        } else {
                            v
                        }
                    } else {
                        0.0
                    }
                })
                .collect();
            let mut d = DenseArray::new(shape, values).unwrap();
            if fill != 0.0 {
                // Absent entries read as the fill. A dense level stores every entry (zeros
                // included), so the oracle sees the tensor exactly as it is stored.
                for v in d.data.iter_mut().filter(|v| **v == 0.0) {
                    *v = fill;
                }
                let stored: Tensor<f64, u64> =
                    Tensor::from_entries(d.dims.clone(), t.format.clone(), fill_entries(&d, fill))
                        .unwrap_or_else(|e| panic!("{}: {e}", t.name));
                d.data = densify(&stored, fill);
            }
            data.insert(t.name.clone(), d);
        }
        Case {
            source: source.to_string(),
            checked,
            dims,
            data,
        }
    }

    pub fn lower(&self) -> Result<Kernel, LowerError> {
        lower::lower(&self.checked)
    }

    pub fn output_name(&self) -> String {
        self.checked.output().name.clone()
    }

    pub fn format_of(&self, name: &str) -> Format {
        self.checked.tensor(name).unwrap().format.clone()
    }

    pub fn out_dims(&self) -> Vec<usize> {
        let lhs = &self.checked.statement.assignment.lhs;
        lhs.indices.iter().map(|i| self.dims[&i.name]).collect()
    }

    /// The inputs in the order the checker lists them (the kernel's argument order).
    pub fn input_tensors<I: Index>(&self) -> Vec<Tensor<f64, I>> {
        self.input_tensors_as::<f64, I>()
    }

    pub fn input_tensors_as<V: Value, I: Index>(&self) -> Vec<Tensor<V, I>> {
        self.checked
            .inputs()
            .iter()
            .map(|t| {
                let d = &self.data[&t.name];
                let entries = fill_entries(d, self.fill());
                Tensor::from_entries(d.dims.clone(), t.format.clone(), entries)
                    .unwrap_or_else(|e| panic!("{}: {e}", t.name))
            })
            .collect()
    }

    /// The value of an absent entry (the reduction's identity).
    pub fn fill(&self) -> f64 {
        fill_of(&self.checked)
    }

    pub fn oracle(&self) -> Vec<f64> {
        oracle::evaluate(&self.checked, &self.data, None)
            .unwrap()
            .data
    }

    pub fn describe(&self) -> String {
        format!("`{}` with dims {:?}", self.source, self.dims)
    }
}

/// The nonzero entries of a dense array.
pub fn dense_entries<V: Value>(d: &DenseArray) -> Vec<(Vec<usize>, V)> {
    fill_entries(d, 0.0)
}

/// The entries of a dense array that differ from `fill`.
pub fn fill_entries<V: Value>(d: &DenseArray, fill: f64) -> Vec<(Vec<usize>, V)> {
    let mut out = Vec::new();
    for (flat, v) in d.data.iter().enumerate() {
        if *v != fill {
            let mut coords = vec![0; d.dims.len()];
            let mut rest = flat;
            for m in (0..d.dims.len()).rev() {
                coords[m] = rest % d.dims[m];
                rest /= d.dims[m];
            }
            out.push((coords, V::from_f64(*v)));
        }
    }
    out
}

/// Element-wise equality up to rounding (NaN equals NaN).
pub fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "length differs: {what}");
    for (n, (g, w)) in got.iter().zip(want).enumerate() {
        // Infinities (the fills of `min`/`max`) must match exactly: `|0 - ∞| <= 1e-6·∞` holds.
        let ok = (g.is_nan() && w.is_nan())
            || g == w
            || (w.is_finite() && (g - w).abs() <= 1e-6 * (1.0 + w.abs()));
        assert!(
            ok,
            "element {n}: got {g}, want {w}\ngot  {got:?}\nwant {want:?}\n{what}"
        );
    }
}

/// Block views (SuperTaco §4.2): every input whose first level is dense keeps only a random
/// window `[lo, hi)` of that level's coordinates, stored with `offset = lo`. Returns the
/// blocks and the dense arrays they stand for (zeros outside the window), for the oracle.
pub fn block_inputs<I: Index>(
    case: &Case,
    rng: &mut Rng,
) -> (Vec<Tensor<f64, I>>, HashMap<String, DenseArray>) {
    let mut tensors = Vec::new();
    let mut data = HashMap::new();
    for t in case.checked.inputs() {
        let d = &case.data[&t.name];
        let full: Tensor<f64, I> =
            Tensor::from_entries(d.dims.clone(), t.format.clone(), dense_entries(d)).unwrap();
        let block = match t.format.levels().first() {
            Some(LevelType::Dense) => {
                let mode = t.format.mode_order()[0];
                let n = d.dims[mode];
                let lo = rng.below(n + 1);
                let hi = lo + rng.below(n - lo + 1);
                let mut shifted_dims = d.dims.clone();
                shifted_dims[mode] = hi - lo;
                let entries = dense_entries::<f64>(d)
                    .into_iter()
                    .filter_map(|(mut c, v)| {
                        (lo..hi).contains(&c[mode]).then(|| {
                            c[mode] -= lo;
                            (c, v)
                        })
                    });
                let shifted: Tensor<f64, I> =
                    Tensor::from_entries(shifted_dims, t.format.clone(), entries).unwrap();
                let (_, format, mut levels, vals) = shifted.into_parts();
                levels[0] = tessera_formats::Level::Dense {
                    size: hi - lo,
                    offset: lo,
                };
                Tensor::from_parts(d.dims.clone(), format, levels, vals)
                    .unwrap_or_else(|e| panic!("block of {}: {e}", t.name))
            }
            _ => full,
        };
        data.insert(
            t.name.clone(),
            DenseArray::new(d.dims.clone(), block.to_dense()).unwrap(),
        );
        tensors.push(block);
    }
    (tensors, data)
}

/// The oracle on other data for the same statement.
pub fn oracle_on(case: &Case, data: &HashMap<String, DenseArray>) -> Vec<f64> {
    oracle::evaluate(&case.checked, data, None).unwrap().data
}

/// A random schedule for `c`: up to two split variables (equal ranges, or split points that
/// may lie past the dimension: empty blocks), a random `order`, random `extend`s and `map`.
pub fn random_schedule(c: &Checked, rng: &mut Rng) -> String {
    let mut items = Vec::new();
    let mut outers = Vec::new();
    let mut reduction_outers = Vec::new();
    let mut vars: Vec<&check::VarInfo> = c.vars.iter().collect();
    for n in (1..vars.len()).rev() {
        vars.swap(n, rng.below(n + 1));
    }
    let splits = rng.below(3).min(vars.len());
    for v in &vars[..splits] {
        let kind = if rng.below(2) == 0 {
            (1 + rng.below(5)).to_string()
        } else {
            let mut p = Vec::new();
            let mut at = 0;
            for _ in 0..1 + rng.below(3) {
                at += 1 + rng.below(4);
                p.push(at.to_string());
            }
            format!("[{}]", p.join(", "))
        };
        let outer = format!("{}o", v.name);
        items.push(format!("split({}, {outer}, {}i, {kind})", v.name, v.name));
        if !v.free {
            reduction_outers.push(outer.clone());
        }
        outers.push(outer);
    }
    for o in &reduction_outers {
        if rng.below(2) == 0 {
            items.push(format!("extend({o})"));
        }
    }
    if outers.len() > 1 && rng.below(2) == 0 {
        outers.reverse();
        items.push(format!("order({})", outers.join(", ")));
    }
    if !outers.is_empty() && rng.below(3) == 0 {
        items.push(format!("map({})", outers[rng.below(outers.len())]));
    }
    items.join("; ")
}
