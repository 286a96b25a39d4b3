#include "cli_docs/cli_docs.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <sstream>
#include <string_view>

namespace baton::cli_docs {

namespace {

struct command_node {
  std::string path;  // "" for the app, "service install" for a nested one
  const CLI::App* app;
};

// CLI11 hides a subcommand or an option by putting it in the empty group.
bool visible(const CLI::App* a) { return !a->get_group().empty(); }
bool visible(const CLI::Option* o) { return !o->get_group().empty(); }

void walk(const CLI::App& app, const std::string& path, std::vector<command_node>& out) {
  out.push_back({path, &app});
  for (const auto* sub : app.get_subcommands([](const CLI::App* s) { return visible(s); })) {
    walk(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), out);
  }
}

std::vector<command_node> commands(const CLI::App& app) {
  std::vector<command_node> out;
  walk(app, "", out);
  return out;
}

std::vector<const CLI::Option*> flags_of(const CLI::App& app) {
  return app.get_options([](const CLI::Option* o) { return o->nonpositional() && visible(o); });
}

std::vector<const CLI::Option*> positionals_of(const CLI::App& app) {
  return app.get_options([](const CLI::Option* o) { return !o->nonpositional(); });
}

std::vector<const CLI::App*> subcommands_of(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App* s) { return visible(s); });
}

bool takes_value(const CLI::Option* o) { return o->get_items_expected_max() > 0; }

std::vector<std::string> names_of(const CLI::Option* o) {
  std::vector<std::string> names;
  for (const auto& s : o->get_snames()) names.push_back("-" + s);
  for (const auto& l : o->get_lnames()) names.push_back("--" + l);
  return names;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// "baton: keeps ..." -> "keeps ...": the NAME line already starts with the program.
std::string without_name(const std::string& description, const std::string& name) {
  const std::string prefix = name + ": ";
  return description.rfind(prefix, 0) == 0 ? description.substr(prefix.size()) : description;
}

// Text for roff: a backslash is \e, a line starting with '.' or '\'' would be a request, and in
// option names '-' is \- so the page shows (and copies) a real ASCII minus.
std::string roff(std::string_view text, bool minus = false) {
  std::string out;
  bool line_start = true;
  for (const char c : text) {
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-' && minus) {
      out += "\\-";
    } else {
      out += c;
    }
    line_start = c == '\n';
  }
  return out;
}

// A paragraph whose line breaks survive filling, without the blank lines groff warns about.
std::string roff_lines(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (!out.empty()) out += "\n.br\n";
    out += roff(line);
  }
  return out;
}

std::string value_label(const CLI::Option* o) {
  std::string type = o->get_type_name();
  if (type.empty()) type = "VALUE";
  return type;
}

std::string synopsis(const std::string& program, const command_node& c) {
  std::string s = "\\fB" + roff(program, true);
  if (!c.path.empty()) s += " " + roff(c.path, true);
  s += "\\fR";
  if (!flags_of(*c.app).empty()) s += " [\\fIOPTIONS\\fR]";
  if (!subcommands_of(*c.app).empty()) s += " \\fICOMMAND\\fR";
  for (const auto* p : positionals_of(*c.app)) {
    std::string name = "\\fI" + roff(p->get_name(), true) + "\\fR";
    if (p->get_items_expected_max() > 1) name += "...";
    s += " " + (p->get_required() ? name : "[" + name + "]");
  }
  return s;
}

void man_options(std::ostream& out, const CLI::App& app) {
  for (const auto* p : positionals_of(app)) {
    out << ".TP\n\\fI" << roff(p->get_name(), true) << "\\fR\n"
        << roff_lines(p->get_description()) << "\n";
  }
  for (const auto* o : flags_of(app)) {
    out << ".TP\n";
    const auto names = names_of(o);
    for (std::size_t i = 0; i < names.size(); ++i) {
      out << (i ? ", " : "") << "\\fB" << roff(names[i], true) << "\\fR";
    }
    if (takes_value(o)) out << " \\fI" << roff(value_label(o), true) << "\\fR";
    out << "\n" << roff_lines(o->get_description()) << "\n";
  }
}

// A word for a shell's double-quoted case pattern or a single-quoted word: command and flag
// names are [a-z0-9_-] in practice, anything else is escaped for the quoting used.
std::string single_quoted(const std::string& text) {
  std::string out = "'";
  for (const char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// What the word after a command's flags stands for: a job id, a file, or nothing.
std::string positional_kind(const CLI::App& app, const std::vector<std::string>& id_positionals) {
  const auto pos = positionals_of(app);
  if (pos.empty()) return "";
  for (const auto* p : pos) {
    if (std::find(id_positionals.begin(), id_positionals.end(), p->get_name()) !=
        id_positionals.end()) {
      return "id";
    }
  }
  return "file";
}

// The shared part of both scripts: the loop over the words before the cursor that finds the
// command path being typed and whether the last word was a flag still waiting for its value.
std::string path_cases(const std::vector<command_node>& nodes, const std::string& indent) {
  std::ostringstream out;
  for (const auto& c : nodes) {
    for (const auto* sub : subcommands_of(*c.app)) {
      const auto next = c.path.empty() ? sub->get_name() : c.path + " " + sub->get_name();
      out << indent << single_quoted(c.path + "/" + sub->get_name())
          << ") cmd_path=" << single_quoted(next) << " ;;\n";
    }
    std::vector<std::string> valued;
    for (const auto* o : flags_of(*c.app)) {
      if (!takes_value(o)) continue;
      for (const auto& n : names_of(o)) valued.push_back(single_quoted(c.path + "/" + n));
    }
    if (!valued.empty()) {
      out << indent;
      for (std::size_t i = 0; i < valued.size(); ++i) out << (i ? "|" : "") << valued[i];
      out << ") skip=1 ;;\n";
    }
  }
  return out.str();
}

}  // namespace

std::vector<command_flags> visible_commands(const CLI::App& app) {
  std::vector<command_flags> out;
  for (const auto& c : commands(app)) {
    command_flags f{c.path, {}};
    for (const auto* o : flags_of(*c.app)) {
      for (const auto& l : o->get_lnames()) f.long_flags.push_back("--" + l);
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::string man_page(const CLI::App& app, const man_info& info) {
  const std::string program = app.get_name();
  std::string upper = program;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  const auto nodes = commands(app);
  std::ostringstream out;
  out << ".\\\" Generated from " << program << "'s command line definition; do not edit.\n";
  out << ".TH " << roff(upper, true) << " " << info.section << " \"" << info.date << "\" \""
      << roff(info.version) << "\" \"" << roff(info.manual) << "\"\n";
  out << ".SH NAME\n"
      << roff(program, true) << " \\- "
      << roff(first_line(without_name(app.get_description(), program))) << "\n";
  out << ".SH SYNOPSIS\n";
  for (const auto& c : nodes) {
    if (!c.path.empty() && !subcommands_of(*c.app).empty()) continue;  // its leaves are listed
    out << synopsis(program, c) << "\n.br\n";
  }
  out << ".SH DESCRIPTION\n"
      << roff_lines(info.description.empty() ? without_name(app.get_description(), program)
                                             : info.description)
      << "\n";
  if (!flags_of(app).empty() || !positionals_of(app).empty()) {
    out << ".SH OPTIONS\n";
    man_options(out, app);
  }
  if (nodes.size() > 1) {
    out << ".SH COMMANDS\n";
    for (const auto& c : nodes) {
      if (c.path.empty()) continue;
      out << ".SS \"" << roff(program + " " + c.path, true) << "\"\n"
          << synopsis(program, c) << "\n.PP\n"
          << roff_lines(c.app->get_description()) << "\n";
      man_options(out, *c.app);
    }
  }
  if (!info.footer.empty()) out << ".SH \"EXIT STATUS\"\n" << roff_lines(info.footer) << "\n";
  if (!info.see_also.empty()) {
    out << ".SH \"SEE ALSO\"\n";
    for (std::size_t i = 0; i < info.see_also.size(); ++i) {
      const auto& s = info.see_also[i];
      const auto open = s.find('(');
      out << "\\fB" << roff(s.substr(0, open), true) << "\\fR" << roff(s.substr(open))
          << (i + 1 < info.see_also.size() ? ",\n" : "\n");
    }
  }
  return out.str();
}

std::string bash_completion(const CLI::App& app, const std::vector<std::string>& id_positionals,
                            const std::string& id_command) {
  const std::string program = app.get_name();
  std::string fn = "_" + program;
  std::replace(fn.begin(), fn.end(), '-', '_');
  const auto nodes = commands(app);
  std::ostringstream out;
  out << "# bash completion for " << program
      << ", generated from its command line definition; do not edit.\n"
      << fn << "_ids() { { " << id_command << "; } 2>/dev/null; }\n"
      << fn << "() {\n"
      << "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" cmd_path=\"\" w\n"
      << "  local -i i skip=0\n"
      << "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      << "    w=\"${COMP_WORDS[i]}\"\n"
      << "    if ((skip)); then skip=0; continue; fi\n"
      << "    case \"$cmd_path/$w\" in\n"
      << path_cases(nodes, "      ") << "    esac\n"
      << "  done\n"
      << "  if ((skip)); then compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "
         "\"$cur\")); return; fi\n"
      << "  local subs=\"\" flags=\"\" pos=\"\"\n"
      << "  case \"$cmd_path\" in\n";
  for (const auto& c : nodes) {
    std::string subs, flags;
    for (const auto* s : subcommands_of(*c.app)) subs += (subs.empty() ? "" : " ") + s->get_name();
    for (const auto* o : flags_of(*c.app)) {
      for (const auto& n : names_of(o)) flags += (flags.empty() ? "" : " ") + n;
    }
    out << "    " << single_quoted(c.path) << ") subs=" << single_quoted(subs)
        << " flags=" << single_quoted(flags)
        << " pos=" << single_quoted(positional_kind(*c.app, id_positionals)) << " ;;\n";
  }
  out << "  esac\n"
      << "  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\")); return; "
         "fi\n"
      << "  if [[ -n $subs ]]; then COMPREPLY=($(compgen -W \"$subs\" -- \"$cur\")); return; fi\n"
      << "  case \"$pos\" in\n"
      << "    id) COMPREPLY=($(compgen -W \"$(" << fn << "_ids)\" -- \"$cur\")) ;;\n"
      << "    file) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n"
      << "  esac\n"
      << "}\n"
      << "complete -F " << fn << " " << program << "\n";
  return out.str();
}

std::string zsh_completion(const CLI::App& app, const std::vector<std::string>& id_positionals,
                           const std::string& id_command) {
  const std::string program = app.get_name();
  std::string fn = "_" + program;
  std::replace(fn.begin(), fn.end(), '-', '_');
  const auto nodes = commands(app);
  // _describe splits "name:description" at the first colon a name never contains.
  const auto entry = [](const std::string& name, const std::string& description) {
    return single_quoted(name + ":" + first_line(description));
  };
  std::ostringstream out;
  out << "#compdef " << program << "\n"
      << "# zsh completion for " << program
      << ", generated from its command line definition; do not edit.\n"
      << fn << "_ids() {\n"
      << "  local -a ids\n"
      << "  ids=(${(f)\"$({ " << id_command << "; } 2>/dev/null)\"})\n"
      << "  (( ${#ids} )) && compadd -a ids\n"
      << "}\n"
      // Not `path`: in zsh that is the array tied to PATH.
      << fn << "() {\n"
      << "  local cmd_path=\"\" w cur=\"${words[CURRENT]}\" pos=\"\"\n"
      << "  local -i i skip=0\n"
      << "  local -a subs flags\n"
      << "  for ((i = 2; i < CURRENT; i++)); do\n"
      << "    w=\"${words[i]}\"\n"
      << "    if ((skip)); then skip=0; continue; fi\n"
      << "    case \"$cmd_path/$w\" in\n"
      << path_cases(nodes, "      (") << "    esac\n"
      << "  done\n"
      << "  if ((skip)); then _files; return; fi\n"
      << "  case \"$cmd_path\" in\n";
  for (const auto& c : nodes) {
    out << "    (" << single_quoted(c.path) << ")\n      subs=(";
    for (const auto* s : subcommands_of(*c.app)) {
      out << " " << entry(s->get_name(), s->get_description());
    }
    out << " )\n      flags=(";
    for (const auto* o : flags_of(*c.app)) {
      for (const auto& n : names_of(o)) out << " " << entry(n, o->get_description());
    }
    out << " )\n      pos=" << single_quoted(positional_kind(*c.app, id_positionals)) << " ;;\n";
  }
  out << "  esac\n"
      << "  if [[ $cur == -* ]]; then _describe -t options 'option' flags; return; fi\n"
      << "  if (( ${#subs} )); then _describe -t commands 'command' subs; return; fi\n"
      << "  case \"$pos\" in\n"
      << "    (id) " << fn << "_ids ;;\n"
      << "    (file) _files ;;\n"
      << "  esac\n"
      << "}\n"
      << fn << " \"$@\"\n";
  return out.str();
}

}  // namespace baton::cli_docs
