// The /web playground's view of a chess observation: the board from the FEN, in Unicode pieces.
openenvPlayground.registerRenderer(function (observation, container, helpers) {
  if (typeof observation.fen !== "string" || !observation.fen) return false;
  const pieces = { K: "♔", Q: "♕", R: "♖", B: "♗", N: "♘", P: "♙", k: "♚", q: "♛", r: "♜", b: "♝", n: "♞", p: "♟" };
  const ranks = observation.fen.split(" ")[0].split("/");
  const lines = ranks.map((rank, index) => {
    let row = "";
    for (const symbol of rank) row += /\d/.test(symbol) ? " ·".repeat(Number(symbol)) : " " + pieces[symbol];
    return 8 - index + row;
  });
  lines.push("  a b c d e f g h");
  const board = helpers.pre(lines.join("\n"), "board");
  board.dataset.field = "board";
  container.append(board);
  const facts = [];
  if (observation.agent_color) facts.push("you play " + observation.agent_color);
  if (observation.last_opponent_move) facts.push("opponent played " + observation.last_opponent_move);
  if (observation.is_check) facts.push("check");
  if (observation.result) facts.push("result " + observation.result + (observation.termination ? " (" + observation.termination + ")" : ""));
  if (observation.illegal_move) facts.push("illegal move");
  if (observation.message) facts.push(observation.message);
  if (facts.length) container.append(helpers.el("p", { text: facts.join(" · ") }));
  container.append(helpers.el("div", { class: "obs-name", text: "fen" }), helpers.pre(observation.fen));
  if (observation.legal_moves && observation.legal_moves.length) {
    container.append(helpers.el("div", { class: "obs-name", text: "legal moves" }), helpers.pre(observation.legal_moves.join(" ")));
  }
  return true;
});
