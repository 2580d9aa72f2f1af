// Prints, as a JSON list, the id of every unit Grafana's unit picker offers
// (@grafana/data's getValueFormats(), the list the field config "unit" option reads).
// @grafana/data reads two browser globals when it loads and lists date formats.
globalThis.window = globalThis;
globalThis.navigator = globalThis.navigator ?? { language: "en-US", languages: ["en-US"] };
const { getValueFormats } = require("@grafana/data");

const ids = [];
const walk = (items) => {
  for (const item of items) {
    if (item.value !== undefined) ids.push(item.value);
    if (item.submenu) walk(item.submenu);
  }
};
walk(getValueFormats());
process.stdout.write(JSON.stringify(ids));
