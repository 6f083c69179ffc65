//! The system ICU collator (ICU4C's `ucol.h`), behind a safe, shareable handle.
//!
//! Every unsafe call is here. A collator is configured once (attributes set while it is still
//! owned by one thread) and then only read: ICU4C documents `ucol_strcoll*`, `ucol_getSortKey`
//! and the getters as safe to call concurrently on one collator that is no longer modified,
//! which is what `Send + Sync` below rely on (mongod shares its collators the same way).

use std::cmp::Ordering;
use std::ffi::{CStr, CString};
use std::ptr::NonNull;

use rust_icu_sys as sys;
use rust_icu_sys::versioned_function;

pub(crate) use sys::{UColAttribute as Attribute, UColAttributeValue as AttributeValue, UColReorderCode as ReorderCode};

/// An open ICU collator. Dropping it closes it.
#[derive(Debug)]
pub(crate) struct IcuCollator {
    handle: NonNull<sys::UCollator>,
}

// SAFETY: the handle is owned (closed once, on drop) and ICU4C collators may be used from any
// thread.
unsafe impl Send for IcuCollator {}
// SAFETY: shared references only reach ICU's read-only functions (see the module comment);
// the setters take `&mut self`.
unsafe impl Sync for IcuCollator {}

/// An ICU error code that is a failure (warnings are not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IcuFailure(pub(crate) sys::UErrorCode);

fn check(status: sys::UErrorCode) -> Result<(), IcuFailure> {
    // ICU: codes above U_ZERO_ERROR are failures, below it warnings.
    if (status as i32) > (sys::UErrorCode::U_ZERO_ERROR as i32) {
        Err(IcuFailure(status))
    } else {
        Ok(())
    }
}

impl IcuCollator {
    /// `ucol_open`: the collator for `locale` (ICU falls back to a parent locale or the root
    /// when it has no data for it; [`IcuCollator::valid_locale`] tells which it used).
    pub(crate) fn open(locale: &CString) -> Result<IcuCollator, IcuFailure> {
        let mut status = sys::UErrorCode::U_ZERO_ERROR;
        // SAFETY: `locale` is a NUL-terminated string that outlives the call; `status` is a
        // valid out-pointer.
        let raw = unsafe { versioned_function!(ucol_open)(locale.as_ptr(), &mut status) };
        check(status)?;
        NonNull::new(raw).map(|handle| IcuCollator { handle }).ok_or(IcuFailure(sys::UErrorCode::U_MEMORY_ALLOCATION_ERROR))
    }

    /// The locale whose data the collator actually uses (`ULOC_VALID_LOCALE`); "root" or ""
    /// when ICU fell back to the root collation.
    pub(crate) fn valid_locale(&self) -> Result<String, IcuFailure> {
        let mut status = sys::UErrorCode::U_ZERO_ERROR;
        // SAFETY: the handle is open; the returned pointer (when not null) is a NUL-terminated
        // string owned by the collator, copied before the collator can be dropped.
        let name = unsafe {
            let raw = versioned_function!(ucol_getLocaleByType)(self.handle.as_ptr(), sys::ULocDataLocaleType::ULOC_VALID_LOCALE, &mut status);
            check(status)?;
            if raw.is_null() {
                return Ok(String::new());
            }
            CStr::from_ptr(raw).to_string_lossy().into_owned()
        };
        Ok(name)
    }

    pub(crate) fn attribute(&self, attribute: Attribute) -> Result<AttributeValue, IcuFailure> {
        let mut status = sys::UErrorCode::U_ZERO_ERROR;
        // SAFETY: the handle is open; `status` is a valid out-pointer.
        let value = unsafe { versioned_function!(ucol_getAttribute)(self.handle.as_ptr(), attribute, &mut status) };
        check(status)?;
        Ok(value)
    }

    pub(crate) fn set_attribute(&mut self, attribute: Attribute, value: AttributeValue) -> Result<(), IcuFailure> {
        let mut status = sys::UErrorCode::U_ZERO_ERROR;
        // SAFETY: the handle is open and exclusively borrowed; `status` is a valid out-pointer.
        unsafe { versioned_function!(ucol_setAttribute)(self.handle.as_ptr(), attribute, value, &mut status) };
        check(status)
    }

    pub(crate) fn max_variable(&self) -> ReorderCode {
        // SAFETY: the handle is open.
        unsafe { versioned_function!(ucol_getMaxVariable)(self.handle.as_ptr()) }
    }

    pub(crate) fn set_max_variable(&mut self, group: ReorderCode) -> Result<(), IcuFailure> {
        let mut status = sys::UErrorCode::U_ZERO_ERROR;
        // SAFETY: the handle is open and exclusively borrowed; `status` is a valid out-pointer.
        unsafe { versioned_function!(ucol_setMaxVariable)(self.handle.as_ptr(), group, &mut status) };
        check(status)
    }

    /// `ucol_strcollUTF8`. Strings longer than `i32::MAX` bytes cannot be BSON values.
    pub(crate) fn compare(&self, left: &str, right: &str) -> Ordering {
        let mut status = sys::UErrorCode::U_ZERO_ERROR;
        let left_length = i32::try_from(left.len()).unwrap_or(i32::MAX);
        let right_length = i32::try_from(right.len()).unwrap_or(i32::MAX);
        // SAFETY: both pointers address `length` valid UTF-8 bytes that outlive the call.
        let result = unsafe {
            versioned_function!(ucol_strcollUTF8)(
                self.handle.as_ptr(),
                left.as_ptr().cast(),
                left_length,
                right.as_ptr().cast(),
                right_length,
                &mut status,
            )
        };
        if check(status).is_err() {
            // Only invalid UTF-8 fails, which a Rust string cannot be.
            return left.cmp(right);
        }
        match result {
            sys::UCollationResult::UCOL_LESS => Ordering::Less,
            sys::UCollationResult::UCOL_EQUAL => Ordering::Equal,
            sys::UCollationResult::UCOL_GREATER => Ordering::Greater,
        }
    }

    /// `ucol_getSortKey`: bytes whose `memcmp` order is this collator's order (ending in 0).
    pub(crate) fn sort_key(&self, value: &str) -> Vec<u8> {
        let utf16: Vec<u16> = value.encode_utf16().collect();
        let length = i32::try_from(utf16.len()).unwrap_or(i32::MAX);
        let mut key = vec![0_u8; utf16.len() * 4 + 16];
        // Bounded: the second pass gets the exact size the first reported.
        for _ in 0..2 {
            let capacity = i32::try_from(key.len()).unwrap_or(i32::MAX);
            // SAFETY: `utf16` holds `length` code units; `key` is writable for `capacity` bytes.
            let needed = unsafe {
                versioned_function!(ucol_getSortKey)(self.handle.as_ptr(), utf16.as_ptr(), length, key.as_mut_ptr(), capacity)
            };
            let needed = usize::try_from(needed).unwrap_or(0);
            if needed <= key.len() {
                key.truncate(needed);
                return key;
            }
            key = vec![0_u8; needed];
        }
        key
    }
}

impl Drop for IcuCollator {
    fn drop(&mut self) {
        // SAFETY: the handle was opened by `ucol_open` and is closed exactly once, here.
        unsafe { versioned_function!(ucol_close)(self.handle.as_ptr()) };
    }
}
