//! `DLOCK.STATS RESET` and `DLOCK.STATS HELP`
//!
//! `RESET` zeroes every counter of `INFO dlock` and its wait histogram, as
//! `CONFIG RESETSTAT` zeroes Redis's own statistics; the gauges (locks,
//! latches, holders, blocked clients, watchers, reservations, the grace
//! window's remaining time) and `dlock_last_token` describe the present and
//! stay. Not propagated: each server (a replica too) keeps its own counts.
//!
//! Replies: `OK` (`RESET`); an array of help lines (`HELP`).
//!
//! Errors, worded as Redis words them for its container commands (`CONFIG`,
//! `CLIENT`): no subcommand: `ERR wrong number of arguments for
//! 'dlock.stats' command`; an unknown one: `ERR unknown subcommand 'x'.
//! Try DLOCK.STATS HELP.`; arguments after `RESET` or `HELP`: `ERR wrong
//! number of arguments for 'dlock.stats|reset' command`.

use std::ffi::CString;

use super::parser::{is_keyword, ArgSource};
use super::{CommandError, CommandResult};
use crate::redis::{info, Argv, Ctx};

/// The lines of `DLOCK.STATS HELP`.
const HELP: [&str; 5] = [
    "DLOCK.STATS <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "RESET",
    "    Zero the counters and the wait histogram of INFO dlock (not the gauges).",
    "HELP",
    "    Print this help.",
];

/// Command entry: `DLOCK.STATS subcommand`.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    if args.count() < 2 {
        return Err(CommandError::WrongArity);
    }
    let subcommand = args.bytes(1);
    let name = if is_keyword(subcommand, "RESET") {
        "reset"
    } else if is_keyword(subcommand, "HELP") {
        "help"
    } else {
        reply_unknown_subcommand(ctx, subcommand);
        return Ok(());
    };
    if args.count() > 2 {
        ctx.reply_error(&message(&format!(
            "ERR wrong number of arguments for 'dlock.stats|{name}' command"
        )));
        return Ok(());
    }
    if name == "reset" {
        info::reset_counters();
        ctx.reply_ok();
    } else {
        ctx.reply_array(HELP.len());
        for line in HELP {
            ctx.reply_bulk(line.as_bytes());
        }
    }
    Ok(())
}

#[cold]
fn reply_unknown_subcommand(ctx: Ctx, subcommand: &[u8]) {
    // Redis shows at most 128 bytes of the name.
    let shown = String::from_utf8_lossy(&subcommand[..subcommand.len().min(128)]);
    ctx.reply_error(&message(&format!(
        "ERR unknown subcommand '{shown}'. Try DLOCK.STATS HELP."
    )));
}

/// An error line as a C string: NUL bytes (from a client's argument) and
/// line breaks would cut or break the reply, so they become spaces.
fn message(text: &str) -> CString {
    let clean: Vec<u8> = text
        .bytes()
        .map(|byte| {
            if matches!(byte, 0 | b'\r' | b'\n') {
                b' '
            } else {
                byte
            }
        })
        .collect();
    CString::new(clean).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_lines_lose_nul_and_line_breaks() {
        let line = message("ERR unknown subcommand 'a\0b\r\nc'.");
        assert_eq!(line.to_bytes(), b"ERR unknown subcommand 'a b  c'.");
    }
}
