//! The slots of the runs in flight in this process: each run holds one, and with it a uid
//! no other run has (see `UID_BASE`).

use std::sync::Mutex;
use std::time::Duration;

use crate::SLOTS;

static BUSY: Mutex<[bool; SLOTS]> = Mutex::new([false; SLOTS]);

/// A slot, free again when dropped.
#[derive(Debug)]
pub(crate) struct Slot(pub(crate) usize);

impl Slot {
    /// The lowest free slot, waiting while all are taken.
    pub(crate) fn take() -> Slot {
        loop {
            {
                let mut busy = BUSY.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(i) = busy.iter().position(|b| !b) {
                    busy[i] = true;
                    return Slot(i);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        BUSY.lock().unwrap_or_else(|e| e.into_inner())[self.0] = false;
    }
}
