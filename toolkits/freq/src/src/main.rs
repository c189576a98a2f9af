//! freq: count what repeats in text — lines, words or characters — most frequent first.
//! The `sort | uniq -c | sort -rn` pipeline as one sandboxed command.

use std::collections::HashMap;
use std::io::{self, BufWriter, Read, Write};

const USAGE: &str = "usage: freq <command> [options] < text
commands:
  lines   identical lines, most frequent first
  words   words (letters, digits, ' and - inside), most frequent first
  chars   characters (Unicode scalar values), most frequent first
options:
  -n N          show the top N (default 20; 0 = all)
  -i            ignore case
  --min=N       only items seen at least N times
  --json        JSON array of {\"item\", \"count\"} instead of `count<TAB>item` lines";

struct Opts {
    top: usize,
    ignore_case: bool,
    min: usize,
    json: bool,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts { top: 20, ignore_case: false, min: 1, json: false };
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "-n" => {
                i += 1;
                o.top = args.get(i).and_then(|v| v.parse().ok()).ok_or("-n needs a number")?;
            }
            "-i" => o.ignore_case = true,
            "--json" => o.json = true,
            _ if a.starts_with("--min=") => o.min = a[6..].parse().map_err(|_| "--min needs a number")?,
            _ => return Err(format!("unknown option {a:?}")),
        }
        i += 1;
    }
    Ok(o)
}

fn words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for (k, &(i, c)) in chars.iter().enumerate() {
        let inner = (c == '\'' || c == '-')
            && start.is_some()
            && chars.get(k + 1).map_or(false, |&(_, n)| n.is_alphanumeric());
        if c.is_alphanumeric() || inner {
            start.get_or_insert(i);
        } else if let Some(s) = start.take() {
            out.push(&text[s..i]);
        }
    }
    if let Some(s) = start {
        out.push(&text[s..]);
    }
    out
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn run(args: &[String]) -> Result<(), (u8, String)> {
    let cmd = args.first().map(String::as_str).unwrap_or("");
    if cmd.is_empty() || cmd == "help" || cmd == "--help" {
        println!("{USAGE}");
        return if cmd.is_empty() { Err((2, "a command is required".into())) } else { Ok(()) };
    }
    if !matches!(cmd, "lines" | "words" | "chars") {
        return Err((2, format!("unknown command {cmd:?}; commands: lines, words, chars")));
    }
    let o = parse(&args[1..]).map_err(|e| (2, e))?;
    let mut raw = Vec::new();
    io::stdin().read_to_end(&mut raw).map_err(|e| (1, e.to_string()))?;
    let mut text = String::from_utf8_lossy(&raw).into_owned();
    if o.ignore_case {
        text = text.to_lowercase();
    }
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut add = |item: &str| {
        let n = counts.entry(item.to_string()).or_insert(0);
        if *n == 0 {
            order.push(item.to_string());
        }
        *n += 1;
    };
    match cmd {
        "lines" => text.lines().for_each(|l| add(l)),
        "words" => words(&text).into_iter().for_each(|w| add(w)),
        _ => text.chars().filter(|c| *c != '\n' && *c != '\r').for_each(|c| add(&c.to_string())),
    }
    // most frequent first; ties keep first-seen order (stable sort)
    let mut items: Vec<(String, usize)> = order.into_iter().map(|k| { let n = counts[&k]; (k, n) }).collect();
    items.sort_by(|a, b| b.1.cmp(&a.1));
    let items: Vec<_> = items.into_iter().filter(|(_, n)| *n >= o.min).take(if o.top == 0 { usize::MAX } else { o.top }).collect();
    let out = io::stdout();
    let mut w = BufWriter::new(out.lock());
    if o.json {
        let parts: Vec<String> = items.iter().map(|(k, n)| format!("{{\"item\":{},\"count\":{}}}", json_str(k), n)).collect();
        writeln!(w, "[{}]", parts.join(",")).map_err(|e| (1, e.to_string()))?;
    } else {
        for (k, n) in &items {
            writeln!(w, "{n}\t{k}").map_err(|e| (1, e.to_string()))?;
        }
    }
    w.flush().map_err(|e| (1, e.to_string()))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err((code, msg)) = run(&args) {
        eprintln!("freq: {msg}");
        // process::exit, not ExitCode: wasm32-wasi's std maps every failing ExitCode to 1
        std::process::exit(i32::from(code));
    }
}
