//! Level formats, in-memory sparse tensors, `.tns`/`.mtx`/`.tcs` files and streaming conversion.
