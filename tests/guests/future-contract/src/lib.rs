//! A test guest that exports `hookhost:provider/plugin@9.0.0`: the host must refuse it
//! with a message naming the version it found and the one it supports.

#[allow(unsafe_code, missing_docs)] // generated canonical-ABI glue
mod bindings {
    wit_bindgen::generate!({ path: "wit", world: "provider" });
}

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)] // generated export glue
mod export {
    struct Future;
    impl super::bindings::exports::hookhost::provider::plugin::Guest for Future {
        fn info() -> String {
            "future".into()
        }
    }
    super::bindings::export!(Future with_types_in super::bindings);
}
