// The global functions of chat templates (range, dict, namespace, raise_exception, strftime_now)
// and the strftime used by strftime_now.
#pragma once

#include <ctime>
#include <string>
#include <string_view>

namespace cypris::jinja {

class Interpreter;

// Registers range, dict, namespace, raise_exception and strftime_now as globals, and the methods of
// str, dict and list values (methods.h) with the interpreter.
void install_globals(Interpreter& interp);

// strftime with C-locale (English) names, independent of the process locale; supports
// %Y %y %m %d %e %H %I %M %S %j %p %a %A %b %h %B %w %F %T %% and glibc's %-d style.
std::string format_time(std::string_view format, const std::tm& tm);

}  // namespace cypris::jinja
