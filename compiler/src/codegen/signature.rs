//! The run-time signature of a kernel: what `tensor!` and generated programs check their
//! arguments against before calling it (`bind::Signature`, in `tessera-kernel-rt`).

use std::fmt::Write as _;

use crate::check::Checked;

/// Rust source for the `bind::Signature` of a kernel: each of its inputs (in argument order)
/// and the output, with the format and index variables of its use in the statement. `bind` is
/// the path of the `bind` module where the source is used.
pub fn signature_source(c: &Checked, kernel_inputs: &[&str], bind: &str) -> String {
    let operand = |name: &str| -> String {
        let info = c
            .tensor(name)
            .expect("kernel inputs are tensors of the statement");
        let uses: Vec<String> = c
            .uses(name)
            .iter()
            .map(|access| {
                let vars: Vec<String> = access
                    .indices
                    .iter()
                    .map(|i| format!("{:?}", i.name))
                    .collect();
                format!("&[{}]", vars.join(", "))
            })
            .collect();
        format!(
            "{bind}::Operand {{ name: {:?}, format: {:?}, uses: &[{}] }}",
            name,
            info.format.to_string(),
            uses.join(", ")
        )
    };
    let mut s = format!("{bind}::Signature {{\n    output: ");
    s += &operand(&c.output().name);
    s += ",\n    inputs: &[\n";
    for name in kernel_inputs {
        let _ = writeln!(s, "        {},", operand(name));
    }
    s += "    ],\n}";
    s
}
