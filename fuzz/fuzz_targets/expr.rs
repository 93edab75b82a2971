//! The expression parser, checker and lowering: a statement either lowers to a kernel (which
//! code generation accepts) or gives a diagnostic that renders against its source; never a
//! panic.
//! The first byte chooses the input's form: even, text as on the command line (the
//! expression on the first line, then `-f FORMAT` and `-s SCHEDULE` lines; the seeds are of
//! this form); odd, a structured statement (`arbitrary`) over a few tensor and index names,
//! with formats, a schedule and known dimensions.
#![no_main]
use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use tessera_fuzz::compile::{compile, Statement};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let text = String::from_utf8_lossy(rest);
        let mut lines = text.lines();
        let expr = lines.next().unwrap_or_default();
        let (mut formats, mut schedule) = (Vec::new(), None);
        for l in lines {
            if let Some(f) = l.strip_prefix("-f ") {
                formats.push(f.to_string());
            } else if let Some(s) = l.strip_prefix("-s ") {
                schedule = Some(s.to_string());
            }
        }
        compile(expr, &formats, schedule.as_deref(), &Default::default());
    } else if let Ok(s) = Statement::arbitrary(&mut Unstructured::new(rest)) {
        compile(&s.expr(), &s.formats(), s.schedule().as_deref(), &s.dims());
    }
});
