// Chat template facade over the Jinja engine.
#include "text/chat_template.hpp"

namespace actorllm::text {

chat_template chat_template::parse(std::string source) {
  jinja::parse_options options;
  options.name = "chat template";
  jinja::compiled_template compiled = jinja::compiled_template::parse(source, options);
  return chat_template(std::move(source), std::move(compiled));
}

std::string chat_template::render(const chat_template_inputs& inputs, const jinja::render_limits& limits) const {
  jinja::value variables = jinja::value::dict();
  auto& vars = variables.mutable_dict();
  vars.set(jinja::value("messages"), inputs.messages);
  vars.set(jinja::value("add_generation_prompt"), jinja::value(inputs.add_generation_prompt));
  vars.set(jinja::value("tools"), inputs.tools ? *inputs.tools : jinja::value::none());
  if (inputs.bos_token)
    vars.set(jinja::value("bos_token"), jinja::value(*inputs.bos_token));
  if (inputs.eos_token)
    vars.set(jinja::value("eos_token"), jinja::value(*inputs.eos_token));
  for (const auto& [name, v] : inputs.extra)
    vars.set(jinja::value(name), v);
  jinja::render_options options;
  options.limits = limits;
  options.now = inputs.now;
  return compiled_.render(variables, options);
}

}  // namespace actorllm::text
