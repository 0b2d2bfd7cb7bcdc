//! `with_*` setters for option structs, which are `#[non_exhaustive]` (so new options can be
//! added without breaking callers): build them as `LogOptions::default().with_segment_bytes(n)`.

/// Generates `pub fn with_<field>(self, value) -> Self` for each listed field.
macro_rules! with_setters {
    ($ty:ident { $($setter:ident => $field:ident: $fty:ty),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("These options with `", stringify!($field), "` set (see the field for its default and range).")]
                #[must_use]
                pub fn $setter(mut self, $field: $fty) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}
