//! The schedule language on a few fixed statements (the first byte picks one). The second
//! byte chooses the form: even, schedule text (the seeds); odd, structured directives
//! (`split`, `order`, `extend`, `map`, `parallelize` over real and made-up variables). The
//! checker accepts the schedule and the statement lowers, or a diagnostic renders; never a
//! panic.
#![no_main]
use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use tessera_fuzz::compile::{compile, Directive};

const STATEMENTS: [(&str, &[&str]); 4] = [
    ("y(i) = A(i,j) * x(j)", &["A:csr"]),
    ("C(i,j) = A(i,k) * B(k,j)", &["A:csr", "B:csr", "C:csr"]),
    ("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", &["B:csf"]),
    ("a = b(i) * c(i)", &[]),
];

fuzz_target!(|data: &[u8]| {
    let [which, mode, rest @ ..] = data else {
        return;
    };
    let text = if mode % 2 == 0 {
        String::from_utf8_lossy(rest).into_owned()
    } else {
        let Ok(d) = Vec::<Directive>::arbitrary(&mut Unstructured::new(rest)) else {
            return;
        };
        let d: Vec<String> = d.iter().take(8).map(Directive::text).collect();
        d.join("; ")
    };
    let (expr, formats) = STATEMENTS[*which as usize % STATEMENTS.len()];
    let formats: Vec<String> = formats.iter().map(|s| s.to_string()).collect();
    compile(expr, &formats, Some(&text), &Default::default());
});
