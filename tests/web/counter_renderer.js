// A custom renderer for the counter (the hook of docs/web.md): the count, large.
openenvPlayground.registerRenderer(function (observation, container, helpers) {
  if (typeof observation.count !== "number") return false;
  const big = helpers.el("div", { "data-field": "custom-count", text: "count = " + observation.count });
  big.style.fontSize = "2rem";
  container.append(big);
  return true;
});
