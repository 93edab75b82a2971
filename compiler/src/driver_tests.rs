use super::*;
use crate::check::{check, Dims};
use crate::parse;

fn generated(statement: &str, opts: Options) -> GeneratedCrate {
    let c = check(parse::program(statement, 0).unwrap(), &Dims::new()).unwrap();
    let k = crate::lower::lower(&c).unwrap();
    generate(&c, &k, statement, opts).unwrap()
}

fn file<'a>(g: &'a GeneratedCrate, name: &str) -> &'a str {
    &g.files.iter().find(|(p, _)| p == name).unwrap().1
}

#[test]
fn cache_key_follows_what_is_built() {
    let a = generated("y(i) = A(i,j) * x(j); A: csr", Options::default());
    let again = generated("y(i) = A(i,j) * x(j); A: csr", Options::default());
    assert_eq!(a.key, again.key, "the same statement reuses its build");
    let csc = generated("y(i) = A(i,j) * x(j); A: csc", Options::default());
    let wide = generated(
        "y(i) = A(i,j) * x(j); A: csr",
        Options {
            wide_index: true,
            ..Options::default()
        },
    );
    let narrow = |value| Options {
        value,
        ..Options::default()
    };
    let f32 = generated("y(i) = A(i,j) * x(j); A: csr", narrow(ValueType::F32));
    let i64 = generated("y(i) = A(i,j) * x(j); A: csr", narrow(ValueType::I64));
    let par = generated(
        "y(i) = A(i,j) * x(j); A: csr; parallelize(i)",
        Options::default(),
    );
    for other in [&csc, &wide, &par, &f32, &i64] {
        assert_ne!(a.key, other.key);
        assert_ne!(a.name, other.name);
    }
    assert_ne!(f32.key, i64.key);
    assert!(file(&wide, "src/main.rs").contains("type I = u64;"));
    assert!(file(&a, "src/main.rs").contains("type V = f64;"));
    assert!(file(&f32, "src/main.rs").contains("type V = f32;"));
    assert!(file(&i64, "src/main.rs").contains("type V = i64;"));
}

#[test]
fn an_mpi_program_is_its_own_build() {
    let text = "y(i) = A(i,j) * x(j); A: csr; split(i, io, ii, 4); map(io)";
    let distributed = Options {
        distributed: true,
        ..Options::default()
    };
    let one = generated(text, distributed);
    let mpi = generated(
        text,
        Options {
            mpi: true,
            ..distributed
        },
    );
    assert_ne!(
        one.key, mpi.key,
        "an MPI build never reuses a one-process build"
    );
    let manifest = file(&mpi, "Cargo.toml");
    assert!(manifest.contains("default = [\"mpi\"]"), "{manifest}");
    assert!(
        manifest.contains("mpi = [\"tessera-runtime/mpi\"]"),
        "{manifest}"
    );
    assert!(!file(&one, "Cargo.toml").contains("default = [\"mpi\"]"));
    for g in [&one, &mpi] {
        for (path, text) in &g.files {
            if path.ends_with(".rs") {
                syn::parse_file(text).unwrap_or_else(|e| panic!("{path}: {e}"));
            }
        }
    }
}

#[test]
fn generated_sources_are_rust_with_the_signature() {
    let g = generated(
        "C(i,k) += A(i,j) * B(j,k); A: csr; C: csr",
        Options::default(),
    );
    for (path, text) in &g.files {
        if path.ends_with(".rs") {
            syn::parse_file(text).unwrap_or_else(|e| panic!("{path}: {e}"));
        }
    }
    let main = file(&g, "src/main.rs");
    // `+=` reads the old output as the kernel's last input.
    let a = main.find("name: \"A\"").unwrap();
    let b = main.find("name: \"B\"").unwrap();
    let inputs = main.find("inputs: &[").unwrap();
    let c_in = main[inputs..]
        .find("name: \"C\"")
        .map(|p| p + inputs)
        .unwrap();
    assert!(inputs < a && a < b && b < c_in, "{main}");
    assert!(main.contains("format: \"ds\""), "{main}");
    assert!(file(&g, "Cargo.toml").contains("tessera-formats = { path ="));
    assert_eq!(file(&g, "src/bind.rs"), BIND);
}
