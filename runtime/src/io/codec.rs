//! Little-endian byte encoding of the messages distributed I/O exchanges between ranks.

use super::IoError;

/// Appends values to a message.
#[derive(Default)]
pub(crate) struct Writer(pub Vec<u8>);

impl Writer {
    pub fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }

    pub fn u64s(&mut self, xs: &[u64]) {
        self.u64(xs.len() as u64);
        self.0.extend_from_slice(bytemuck::cast_slice(xs));
    }

    pub fn usizes(&mut self, xs: &[usize]) {
        self.u64(xs.len() as u64);
        for &x in xs {
            self.u64(x as u64);
        }
    }

    pub fn pods<T: bytemuck::Pod>(&mut self, xs: &[T]) {
        self.u64(xs.len() as u64);
        self.0.extend_from_slice(bytemuck::cast_slice(xs));
    }

    pub fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
}

/// Reads values back; every read is bounds-checked, so a short or corrupt message is an
/// error naming the sender.
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    at: usize,
    from: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8], from: usize) -> Self {
        Reader { data, at: 0, from }
    }

    pub fn malformed(&self, what: &str) -> IoError {
        IoError::Internal(format!(
            "malformed message from rank {} at byte {}: {what}",
            self.from, self.at
        ))
    }

    pub fn is_empty(&self) -> bool {
        self.at >= self.data.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], IoError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| self.malformed("message ends early"))?;
        let out = &self.data[self.at..end];
        self.at = end;
        Ok(out)
    }

    pub fn u64(&mut self) -> Result<u64, IoError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn len(&mut self, elem: usize) -> Result<usize, IoError> {
        let n = self.u64()?;
        usize::try_from(n)
            .ok()
            .filter(|n| {
                n.checked_mul(elem)
                    .is_some_and(|b| b <= self.data.len() - self.at)
            })
            .ok_or_else(|| self.malformed("length exceeds the message"))
    }

    pub fn u64s(&mut self) -> Result<Vec<u64>, IoError> {
        self.pods()
    }

    pub fn usizes(&mut self) -> Result<Vec<usize>, IoError> {
        let n = self.len(8)?;
        (0..n).map(|_| self.u64().map(|x| x as usize)).collect()
    }

    pub fn pods<T: bytemuck::Pod>(&mut self) -> Result<Vec<T>, IoError> {
        let n = self.len(std::mem::size_of::<T>())?;
        let bytes = self.take(n * std::mem::size_of::<T>())?;
        // Copy out: the message buffer has no alignment guarantee.
        Ok(bytemuck::pod_collect_to_vec(bytes))
    }

    pub fn bytes(&mut self) -> Result<&'a [u8], IoError> {
        let n = self.len(1)?;
        self.take(n)
    }
}
