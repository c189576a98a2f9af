// wbcore svelte lane: the generated entry of a svelte toolkit (no main.js of its own).
// Reads JSON props on stdin (an object; empty input means {}), renders the component on
// the server (svelte/server's render) and prints the body HTML. `--head` prints the
// <head> content instead.
import * as std from 'qjs:std';
import { render } from '@SERVER@';
import Component from '@COMPONENT@';

const text = std.in.readAsString();
let props = {};
if (text.trim() !== '') {
  try {
    props = JSON.parse(text);
  } catch (e) {
    std.err.puts(`@NAME@: stdin is not JSON (${e.message}); give the props as one JSON object\n`);
    std.exit(2);
  }
}
if (props === null || typeof props !== 'object' || Array.isArray(props)) {
  std.err.puts('@NAME@: the props on stdin must be a JSON object ({"name": value, ...})\n');
  std.exit(2);
}
const out = render(Component, { props });
std.out.puts(scriptArgs.includes('--head') ? out.head : out.body);
std.out.puts('\n');
