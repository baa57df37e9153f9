//! Per-thread copies of a compiled object (a regex): each worker thread
//! keeps its own, so threads never contend for one cache. Keyed by a
//! unique id per compiled object; a thread keeps only its last one.

use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

thread_local! {
    static LOCAL: RefCell<Option<(u64, Rc<dyn Any>)>> = const { RefCell::new(None) };
}

/// A fresh id for [`per_thread`].
pub(crate) fn next_id() -> u64 {
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// This thread's copy of the object `id`, made by `make` on first use.
pub(crate) fn per_thread<T: 'static>(id: u64, make: impl FnOnce() -> T) -> Rc<T> {
    LOCAL.with(|cell| {
        let mut slot = cell.borrow_mut();
        if let Some((held, obj)) = &*slot {
            if *held == id {
                if let Ok(obj) = obj.clone().downcast::<T>() {
                    return obj;
                }
            }
        }
        let obj = Rc::new(make());
        *slot = Some((id, obj.clone()));
        obj
    })
}
