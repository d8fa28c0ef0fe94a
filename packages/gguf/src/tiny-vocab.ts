// The fixed byte-level SPM vocabulary of the tiny test models, and their ChatML-style chat template.
// Every tiny model (target or drafter) shares it token for token, which llama-server -md requires.

/** llama.cpp LLAMA_TOKEN_TYPE_* values (tokenizer.ggml.token_type). */
export const TOKEN_TYPE = { normal: 1, unknown: 2, control: 3, byte: 6 } as const;

export const TINY_SPECIAL = {
  unk: { id: 0, text: "<unk>" },
  bos: { id: 1, text: "<s>" },
  eos: { id: 2, text: "</s>" },
  imStart: { id: 3, text: "<|im_start|>" },
  imEnd: { id: 4, text: "<|im_end|>" },
} as const;

/** SentencePiece's whitespace marker. */
const SP = "\u2581";

const CHARS = [
  SP,
  ..."abcdefghijklmnopqrstuvwxyz",
  ..."ABCDEFGHIJKLMNOPQRSTUVWXYZ",
  ..."0123456789",
  ...".,!?'\"-:;()/",
];

/** Multi-character pieces; each is the concatenation of two other pieces, so SPM merges can reach it. */
const MERGES = [
  ..."tasowicbfmpdhHTIW".split("").map((c) => SP + c),
  ..."th he in er an re on at en nd ou or is it es ed ll ld ing llo ello orld".split(" "),
  ..."th the an and to of in is it he on for wa was be hello Hello world"
    .split(" ")
    .map((w) => SP + w),
];

export interface TinyVocab {
  readonly tokens: readonly string[];
  readonly scores: readonly number[];
  readonly tokenTypes: readonly number[];
}

function buildVocab(): TinyVocab {
  const tokens: string[] = [];
  const scores: number[] = [];
  const tokenTypes: number[] = [];
  const add = (text: string, type: number, score: number): void => {
    tokens.push(text);
    tokenTypes.push(type);
    scores.push(score);
  };
  add(TINY_SPECIAL.unk.text, TOKEN_TYPE.unknown, 0);
  add(TINY_SPECIAL.bos.text, TOKEN_TYPE.control, 0);
  add(TINY_SPECIAL.eos.text, TOKEN_TYPE.control, 0);
  add(TINY_SPECIAL.imStart.text, TOKEN_TYPE.control, 0);
  add(TINY_SPECIAL.imEnd.text, TOKEN_TYPE.control, 0);
  for (let b = 0; b < 256; b++) {
    add(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`, TOKEN_TYPE.byte, 0);
  }
  // Merges score above single characters and longer merges above shorter ones, as in SentencePiece models.
  CHARS.forEach((c, i) => add(c, TOKEN_TYPE.normal, -1000 - i));
  MERGES.forEach((m, i) => add(m, TOKEN_TYPE.normal, -i));
  return { tokens, scores, tokenTypes };
}

export const TINY_VOCAB: TinyVocab = buildVocab();

/**
 * The one token a tools model (TinyModelOptions.tools) adds at the end of the vocabulary: the start
 * of a tool call, newline included, so that once it is sampled the engine's tool grammar is inside
 * the call (the call's JSON is then forced token by token).
 */
export const TINY_TOOL_CALL_TOKEN = "<tool_call>\n";

/** The vocabulary of a tiny model: TINY_VOCAB, plus TINY_TOOL_CALL_TOKEN for a tools model. */
export function tinyVocab(tools: boolean): TinyVocab {
  if (!tools) return TINY_VOCAB;
  return {
    tokens: [...TINY_VOCAB.tokens, TINY_TOOL_CALL_TOKEN],
    scores: [...TINY_VOCAB.scores, 0],
    // A normal piece no merge reaches: the tokenizer never makes it from text (a trigger word that
    // tokenized to one token would have to be a preserved token), but the model can sample it.
    tokenTypes: [...TINY_VOCAB.tokenTypes, TOKEN_TYPE.normal],
  };
}

/** Multi-character normal pieces that cannot be built by merging two other pieces (should be none). */
export function unreachablePieces(vocab: TinyVocab = TINY_VOCAB): string[] {
  const normal = new Set(vocab.tokens.filter((_, i) => vocab.tokenTypes[i] === TOKEN_TYPE.normal));
  return [...normal].filter((piece) => {
    const cps = Array.from(piece);
    if (cps.length === 1) return false;
    for (let k = 1; k < cps.length; k++) {
      if (normal.has(cps.slice(0, k).join("")) && normal.has(cps.slice(k).join(""))) return false;
    }
    return true;
  });
}

/**
 * ChatML-style Jinja template (tokenizer.chat_template). Uses only constructs llama.cpp's jinja engine
 * supports; string content only, which is what the server passes for plain chat messages.
 */
export const TINY_CHAT_TEMPLATE =
  "{%- for message in messages -%}" +
  "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}" +
  "{%- endfor -%}" +
  "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

/**
 * A ChatML template that renders tools (in the system turn, one JSON line each), an assistant's
 * tool calls (`<tool_call>{"name": ..., "arguments": ...}</tool_call>`) and tool results, as Qwen 2.5
 * and Hermes templates do: llama-server's template analysis finds the tool-call format in it, parses
 * calls into `tool_calls` and builds the grammar for `tool_choice: "required"`. An assistant turn
 * holds either calls or text, so that grammar starts with the call (a random tiny model would
 * otherwise write text until max_tokens).
 */
export const TINY_TOOLS_CHAT_TEMPLATE = [
  "{%- if tools -%}",
  "{{- '<|im_start|>system\\n' -}}",
  "{%- if messages[0]['role'] == 'system' -%}{{- messages[0]['content'] + '\\n\\n' -}}{%- endif -%}",
  "{{- '# Tools\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' -}}",
  "{%- for tool in tools -%}{{- '\\n' -}}{{- tool | tojson -}}{%- endfor -%}",
  '{{- \'\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' -}}',
  "{%- elif messages[0]['role'] == 'system' -%}",
  "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' -}}",
  "{%- endif -%}",
  "{%- for message in messages -%}",
  "{%- if message['role'] == 'system' and loop.first -%}",
  "{%- elif message['role'] == 'assistant' -%}",
  "{{- '<|im_start|>assistant' -}}",
  "{%- if message['tool_calls'] -%}{%- for tc in message['tool_calls'] -%}",
  "{%- set f = tc['function'] if tc['function'] is defined else tc -%}",
  "{{- '\\n<tool_call>\\n{\"name\": \"' + f['name'] + '\", \"arguments\": ' -}}",
  "{%- if f['arguments'] is string -%}{{- f['arguments'] -}}{%- else -%}{{- f['arguments'] | tojson -}}{%- endif -%}",
  "{{- '}\\n</tool_call>' -}}",
  "{%- endfor -%}",
  "{%- elif message['content'] -%}{{- '\\n' + message['content'] -}}",
  "{%- endif -%}",
  "{{- '<|im_end|>\\n' -}}",
  "{%- elif message['role'] == 'tool' -%}",
  "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' -}}",
  "{%- else -%}",
  "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}",
  "{%- endif -%}",
  "{%- endfor -%}",
  "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}",
].join("");
